"""A TCP proxy on loopback that injects one network fault between a client (the Docker daemon) and a server (the
test registry): cut the connection after N bytes from the server, delay, reset, answer 503, or stall.
Bounded in time: every connection it holds is closed by stop(), and a stall lasts at most `stall` seconds."""

from __future__ import annotations

import socket
import struct
import threading
import time
from dataclasses import dataclass, field


@dataclass
class FaultProxy:
    target: tuple[str, int]
    mode: str = "pass"  # pass | cut | reset | 503 | stall | delay
    after: int = 0  # cut/reset: bytes from the server passed before the fault (over all connections)
    delay: float = 0.0
    stall: float = 60.0
    faults: int = 1 << 30  # how many connections get the fault; later ones pass
    port: int = 0
    hits: int = 0  # connections that got the fault
    _sock: socket.socket | None = None
    _conns: list[socket.socket] = field(default_factory=list)
    _passed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> "FaultProxy":
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._stop.set()
        for s in [self._sock, *self._conns]:
            try:
                s.close()
            except OSError:
                pass

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            self._conns.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _faulty(self) -> bool:
        return self.mode != "pass" and self.hits < self.faults

    def _serve(self, client: socket.socket) -> None:
        faulty = self._faulty()
        if faulty and self.mode in ("503", "stall"):
            self.hits += 1
            if self.mode == "503":
                client.recv(65536)
                body = b"service unavailable\n"
                client.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            else:
                self._stop.wait(self.stall)
            client.close()
            return
        try:
            server = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        self._conns.append(server)
        threading.Thread(target=self._pipe, args=(client, server, False, False), daemon=True).start()
        self._pipe(server, client, True, faulty)

    def _pipe(self, src: socket.socket, dst: socket.socket, from_server: bool, faulty: bool) -> None:
        try:
            while not self._stop.is_set():
                data = src.recv(65536)
                if not data:
                    break
                if from_server and self.mode == "delay" and faulty:
                    time.sleep(self.delay)
                if from_server and faulty and self.mode in ("cut", "reset") and self._passed + len(data) > self.after:
                    self.hits += 1
                    if self.mode == "reset":  # RST instead of FIN
                        dst.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break
                if from_server:
                    self._passed += len(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.close()
                except OSError:
                    pass

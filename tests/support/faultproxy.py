"""A TCP proxy on loopback that injects one network fault between a client (the Docker daemon) and a server (the
test registry): cut the connections after N bytes from the server, or answer 503 to every request.

One asyncio loop in one thread serves every connection: a connection is closed by the loop that reads it, so no
thread is ever left blocked in a read on a socket another thread closed (the daemon would keep such a connection in
its pool and wait on it for minutes). stop() closes the listener and every connection, and the peers see it."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field


@dataclass
class FaultProxy:
    target: tuple[str, int]
    mode: str = "pass"  # pass | cut | 503; read when a connection opens, so a test may switch it
    after: int = 0  # cut: bytes from the server passed before the fault (over all connections)
    port: int = 0
    hits: int = 0  # connections that got the fault
    _passed: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _server: asyncio.AbstractServer | None = None
    _writers: set = field(default_factory=set)

    def start(self) -> "FaultProxy":
        ready = threading.Event()

        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            self._loop.run_forever()
            self._loop.close()

        threading.Thread(target=run, daemon=True).start()
        if not ready.wait(10):
            raise RuntimeError("the fault proxy did not start")
        return self

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        async def close() -> None:
            self._server.close()
            for w in list(self._writers):
                w.transport.abort()
            await asyncio.sleep(0)

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        mode = self.mode
        try:
            if mode == "503":
                self.hits += 1
                await reader.read(65536)
                body = b"service unavailable\n"
                writer.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                await writer.drain()
                return
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                return
            self._writers.add(up_writer)
            try:  # each pipe closes both ends when it stops
                await asyncio.gather(self._pipe(reader, up_writer, writer, False, mode),
                                     self._pipe(up_reader, writer, up_writer, True, mode))
            finally:
                self._writers.discard(up_writer)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, src_end: asyncio.StreamWriter,
                    from_server: bool, mode: str) -> None:
        """Copy until either side ends, then close both (the other pipe's read ends with it); a cut drops both at once."""
        cut = False
        try:
            while data := await src.read(65536):
                if from_server and mode == "cut" and self._passed + len(data) > self.after:
                    self.hits += 1
                    cut = True
                    break
                if from_server:
                    self._passed += len(data)
                dst.write(data)
                await dst.drain()
        except OSError:
            pass
        finally:
            for end in (dst, src_end):
                if cut:
                    end.transport.abort()
                else:
                    end.close()

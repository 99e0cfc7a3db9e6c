"""A real package index for tests: PEP 503 simple pages and wheels, served over HTTP on loopback from a thread.

Its wheels are made here (pure Python, a module with its version), so a test can publish a new release
while a lock or an image should keep the old one.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any",
               requires_python: str | None = None) -> Path:
    """A wheel of `name` whose module says its version (pure Python unless `tag` names a platform)."""
    dist = re.sub(r"[-_.]+", "_", name)
    files = {
        f"{dist}/__init__.py": f'__version__ = "{version}"\n'.encode(),
        f"{dist}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + (f"Requires-Python: {requires_python}\n" if requires_python else "")
            + "".join(f"Requires-Dist: {r}\n" for r in requires)).encode(),
        f"{dist}-{version}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: envbuild-tests\nRoot-Is-Purelib: true\nTag: " + tag.encode() + b"\n",
    }
    record = f"{dist}-{version}.dist-info/RECORD"
    files[record] = ("".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in files.items()) + f"{record},,\n").encode()
    path = folder / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for p, d in files.items():
            zf.writestr(zipfile.ZipInfo(p, date_time=(2026, 1, 1, 0, 0, 0)), d)
    return path


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class SimpleIndex:
    """http://127.0.0.1:PORT/simple/ with the releases added so far."""

    def __init__(self, root: Path):
        self.root = root
        (root / "files").mkdir(parents=True, exist_ok=True)
        self.projects: dict[str, list[Path]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(root)))
        self.thread = threading.Thread(target=self.server.serve_forever, name="envbuild-test-index", daemon=True)

    @property
    def url(self) -> str:
        return self.url_of("simple")

    def url_of(self, folder: str) -> str:
        """The URL of another index on this server (e.g. "whl/cu132", as PyTorch names its CUDA indexes)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}/{folder}"

    def add(self, name: str, version: str, requires: tuple[str, ...] = (), *, tag: str = "py3-none-any",
            metadata: bool = False, yanked: bool = False, requires_python: str | None = None,
            folder: str = "simple") -> Path:
        """Publish a release; with `metadata`, its core metadata beside it (PEP 658), as PyPI serves it; `folder`:
        the index it is listed on."""
        wheel = make_wheel(self.root / "files", name, version, requires, tag, requires_python)
        project = re.sub(r"[-_.]+", "-", name).lower()
        key = project if folder == "simple" else f"{folder}/{project}"
        self.projects.setdefault(key, []).append(wheel)
        self.attrs = getattr(self, "attrs", {})
        attrs = ' data-yanked=""' if yanked else ""
        if requires_python:
            attrs += f' data-requires-python="{html.escape(requires_python)}"'
        if metadata:
            with zipfile.ZipFile(wheel) as zf:
                meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
                data = zf.read(meta)
            Path(str(wheel) + ".metadata").write_bytes(data)
            attrs += f' data-core-metadata="sha256={hashlib.sha256(data).hexdigest()}"'
        self.attrs[wheel.name] = attrs
        page = self.root / folder / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        up = "../" * (folder.count("/") + 2)
        links = "".join(f'<a href="{up}files/{w.name}#sha256={hashlib.sha256(w.read_bytes()).hexdigest()}"'
                        f'{self.attrs.get(w.name, "")}>{html.escape(w.name)}</a>\n' for w in self.projects[key])
        page.write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
        listed = sorted(k.rpartition("/")[2] for k in self.projects if k.rpartition("/")[0] == ("" if folder == "simple" else folder))
        (self.root / folder / "index.html").write_text(
            "<!DOCTYPE html>\n<html><body>\n" + "".join(f'<a href="{p}/">{p}</a>\n' for p in listed)
            + "</body></html>\n")
        return wheel

    def __enter__(self) -> "SimpleIndex":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

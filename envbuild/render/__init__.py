"""Validated backends -> Dockerfile text, written atomically and checked for staleness.

`rendered_for` keeps what it rendered with every input it was rendered from (cache_inputs): a repeated `render`
or `render --check` then needs neither PyYAML, Jinja nor the matrix model, which are most of its time.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from envbuild.core.errors import EnvbuildError
from envbuild.core.files import read_user, write_all
from envbuild.core.paths import PACKAGE, cache_dir, default_matrix, metadata_path
from envbuild.core.text import shown

if TYPE_CHECKING:
    from envbuild.matrix import Backend, Matrix

TEMPLATES = Path(__file__).parent / "templates"
# The uv cache logic of every install step: the build context carries it, and each step reads it (`. /run/uv-step.sh`).
UV_STEP = Path(__file__).parent / "scripts" / "uv-step.sh"
VENV = "/opt/venv"
CONSTRAINTS = "/opt/envbuild/constraints.txt"


@functools.cache
def _environment() -> Any:
    """The Jinja environment, made on first use: a cached render never imports Jinja."""
    import jinja2

    class BytecodeCache(jinja2.FileSystemBytecodeCache):
        """The compiled template, kept between runs (Jinja checks it against the template's source): parsing
        and compiling it costs more than the rest of `envbuild render`. A cache that cannot be written is
        skipped, never an error."""

        def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            import io

            filename = self._get_cache_filename(bucket)
            if not os.path.lexists(filename):
                return
            try:  # a regular file of bounded size (never a FIFO); anything it holds that is not a cache is skipped
                bucket.load_bytecode(io.BytesIO(read_user(filename, filename, limit=16 << 20)))
            except Exception:  # a corrupt cache (truncated, garbage, another version's): compile afresh
                bucket.reset()

        def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
            try:
                os.makedirs(self.directory, exist_ok=True)
                super().dump_bytecode(bucket)
            except OSError:
                pass

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
        bytecode_cache=BytecodeCache(str(cache_dir("templates")), "envbuild-%s.cache"),
    )


def dockerfile_name(backend: Backend) -> str:
    return f"{backend.name}.Dockerfile"


def render_backend(matrix: Matrix, backend: Backend) -> str:
    """The Dockerfile for one containerizable backend; same input, same bytes."""
    # torch from pip goes into a venv of our own; a vendor's torch stays in the vendor's environment
    # (a venv made on top of it would not see packages of a base that is itself a venv).
    from envbuild.core.imageref import Reference
    from envbuild.matrix import stacks

    own_venv = backend.torch.source == "pip"
    expect = [("torch", backend.torch.version)]
    if backend.plugin:
        expect.append((backend.plugin.package, backend.plugin.version))
    expect += [("transformers", matrix.pin("transformers", backend)), ("accelerate", matrix.pin("accelerate", backend))]
    python = f"{VENV}/bin/python" if own_venv else backend.python.executable
    # uv installs into exactly this interpreter's environment; a vendor's system Python is marked
    # externally managed (PEP 668), and installing into it is the point.
    python_flag = f"--python {python}"
    torch_layers = backend.torch.source == "pip" or bool(backend.plugin and backend.plugin.source == "pip")
    # Every index the lock may take a package from, torch's first; locked installs take exactly the hashed
    # files, so the best match among them is safe.
    indexes = list(dict.fromkeys(u for u in (matrix.index.url, *matrix.index.extra_urls, backend.torch.index_url,
                                             backend.plugin.index_url if backend.plugin else None) if u))
    index_args = " ".join([f'--index-url "{indexes[0]}"', *(f'--extra-index-url "{u}"' for u in indexes[1:])])
    text = _environment().get_template("Dockerfile.j2").render(
        b=backend,
        image=matrix.image,
        matrix_name=shown(Path(matrix.path).name),  # a file name may hold a newline: never a new instruction
        transformers=matrix.pin("transformers", backend),
        accelerate=matrix.pin("accelerate", backend),
        pins=sorted(backend.pins.items()),
        expect=expect,
        venv=VENV if own_venv else "",
        python=python,
        python_flag=python_flag,
        target=python_flag if own_venv else f"{python_flag} --break-system-packages",
        pip=f"{VENV}/bin/pip" if own_venv else f"{backend.python.executable} -m pip",
        uv=matrix.uv,
        torch_stage="torch" if torch_layers else "base",
        indexes=index_args,
        locked=f"--require-hashes --no-deps --index-strategy unsafe-best-match {index_args} --find-links /run/wheelhouse",
        keep_base=backend.torch.source == "base" or bool(backend.plugin and backend.plugin.source == "base"),
        extras=matrix.packages_for(backend),
        constraints=CONSTRAINTS,
        # The probe's advice when the device is not visible: the flags the matrix says expose it.
        run_flags=" ".join(backend.run.docker_args()),
        version_tag=Reference.parse(matrix.tags(backend)[1]).tag,
        requires=stacks.needs(backend),
        arch_want=" ".join(backend.host.arch if backend.host else ()),
        arch_file=stacks.ARCH_FILE,
    )
    # Collapse runs of blank lines left by optional blocks, so output reads as if hand-written.
    lines: list[str] = []
    for line in text.split("\n"):  # what BuildKit breaks at (str.splitlines breaks at more)
        if line.strip() or (lines and lines[-1].strip()):
            lines.append(line.rstrip())
    return "\n".join(lines).strip() + "\n"


def render(matrix: Matrix, backends: list[Backend]) -> dict[str, str]:
    return {dockerfile_name(b): render_backend(matrix, b) for b in backends}


# --- the render cache ---------------------------------------------------------------------------------------

CACHE_FORMAT = 1
CACHE_KEEP = 32  # entries kept; the oldest go first
MAX_CACHED = 16 << 20  # bytes of one entry
# Besides envbuild's own code and templates, the code that decides the text: the template engine and what it
# escapes with, the YAML parser and the version rules the matrix is validated with.
LIBRARIES = ("jinja2", "markupsafe", "yaml", "packaging")
CACHE_DIR: Path | None = None  # None: cache_dir("render"); tests point it elsewhere


def _tree_stamp(root: str) -> list[list[Any]]:
    """(path, size, mtime in ns) of every file under `root`, as Python's own bytecode cache keys a source: an
    edit or a reinstall moves the mtime, and a change of size is caught even where the mtime is coarse."""
    out: list[list[Any]] = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path)
            except OSError:
                out.append([os.path.relpath(path, root), None, None])
                continue
            out.append([os.path.relpath(path, root), st.st_size, st.st_mtime_ns])
    return out


def _library_root(name: str) -> str | None:
    """Where `name` would be imported from, found without importing it."""
    from importlib.machinery import PathFinder

    spec = PathFinder.find_spec(name, sys.path)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    return spec.origin


def _library_stamp(root: str) -> Any:
    """A library's files (a folder) or its one module; one that is neither (inside a zip) cannot be stamped, and
    then nothing is cached (OSError)."""
    if os.path.isdir(root):
        return _tree_stamp(root)
    if os.path.isfile(root):
        return _file_input(Path(root))
    raise FileNotFoundError(f"{root}: not a folder or a file, cannot tell when it changes")


def _file_input(path: Path) -> dict[str, Any] | None:
    """A file's whole text and its stat; None when there is none. Read as files a user names are (a regular
    file, at most MAX_CACHED bytes); one that cannot be read, or is not UTF-8, raises and turns the cache off
    for this run: the loader then says why, or renders it uncached."""
    if not os.path.lexists(path):
        return None
    st = os.stat(path)
    text = read_user(path, str(path), limit=MAX_CACHED).decode("utf-8")
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "inode": [st.st_dev, st.st_ino], "text": text}


def cache_inputs(matrix_path: str, overrides: Iterable[str], backends: Iterable[str]) -> dict[str, Any]:
    """Everything that decides what `rendered_for` returns, or whether it refuses: a cached answer is taken only
    when every one of these is equal to what it was kept with (compared whole, not by a hash of them). Raises
    OSError, UnicodeDecodeError or EnvbuildError when a file cannot be read."""
    return {
        "format": CACHE_FORMAT,
        "python": sys.version,
        "envbuild": _tree_stamp(str(PACKAGE)),  # its code, the templates among it
        "libraries": {name: [root, _library_stamp(root)] if (root := _library_root(name)) else None
                      for name in LIBRARIES},
        "matrix_as_given": matrix_path,  # the Dockerfile names the file as given
        "matrix": os.path.realpath(matrix_path),  # a trust key's path is taken relative to it
        "matrix_file": _file_input(Path(matrix_path)),
        "metadata_file": _file_input(metadata_path(matrix_path)),  # validation holds the pins to it
        "overrides": list(overrides),
        "backends": list(backends),
    }


def _cache_path(inputs: dict[str, Any]) -> Path:
    """Where the entry for these inputs is kept: named by a checksum of them (two inputs that share a name
    only take turns in it: what decides a hit is the comparison of the inputs themselves)."""
    import json
    import zlib

    name = f"{zlib.crc32(json.dumps(inputs, sort_keys=True).encode()):08x}.json"
    return (CACHE_DIR or cache_dir("render")) / name


def _cache_read(inputs: dict[str, Any]) -> dict[str, str] | None:
    """The Dockerfiles kept for exactly these inputs; None when there are none, or the entry is not one envbuild
    wrote (never an error)."""
    import json
    import re

    path = _cache_path(inputs)
    if not os.path.lexists(path):
        return None
    try:
        doc = json.loads(read_user(path, str(path), limit=MAX_CACHED).decode("utf-8"))
    except (EnvbuildError, ValueError, RecursionError):
        return None
    files = doc.get("files") if isinstance(doc, dict) and doc.get("inputs") == inputs else None
    if not isinstance(files, dict) or not all(
            isinstance(n, str) and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*\.Dockerfile", n) and isinstance(t, str)
            for n, t in files.items()):
        return None
    return files


def _cache_write(inputs: dict[str, Any], rendered: dict[str, str]) -> None:
    """Keep `rendered` for `inputs`, and no more than CACHE_KEEP entries. A cache that cannot be written is
    skipped, never an error."""
    import json

    from envbuild.core.files import write_atomic

    path = _cache_path(inputs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"format": CACHE_FORMAT, "inputs": inputs, "files": rendered}), mode=0o600)
        entries = sorted(path.parent.glob("*.json"), key=lambda e: e.stat().st_mtime_ns)
        for old in entries[:-CACHE_KEEP]:
            old.unlink()
    except (OSError, EnvbuildError):
        pass


def rendered_for(matrix_path: str | None, overrides: Iterable[str] = (), backends: Iterable[str] = (), *,
                 cache: bool = True) -> dict[str, str]:
    """The Dockerfiles of the backends named (default: every containerizable one) of the matrix file, validated
    as `envbuild validate` does; from the render cache when none of its inputs changed (cache_inputs)."""
    path = matrix_path or default_matrix()
    overrides, backends = tuple(overrides), tuple(backends)
    inputs = None
    if cache:
        try:
            inputs = cache_inputs(path, overrides, backends)
        except (OSError, UnicodeDecodeError, EnvbuildError):  # unreadable: the loader says why
            inputs = None
        hit = _cache_read(inputs) if inputs else None
        if hit is not None:
            return hit
    from envbuild import matrix

    m = matrix.load(path, overrides)
    rendered = render(m, m.select(backends))
    # Kept only if no input moved while it rendered: the entry must hold what its inputs give.
    if inputs:
        try:
            again = cache_inputs(path, overrides, backends)
        except (OSError, UnicodeDecodeError, EnvbuildError):
            again = None
        if again == inputs:
            _cache_write(inputs, rendered)
    return rendered


@dataclass(frozen=True)
class Difference:
    name: str
    kind: str  # "stale", "missing" or "extra"
    summary: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.name}{' (' + self.summary + ')' if self.summary else ''}"


def write(rendered: dict[str, str], output: Path) -> list[str]:
    """Write every file that changed, all or none: every target is checked and every new text staged beside
    it first; only then do they replace the old ones. Returns the names that changed."""
    for name in rendered:
        target = output / name
        if target.is_symlink() or target.exists() and not target.is_file():
            raise EnvbuildError(f"cannot write {target}: it is not a regular file (a folder or a link); nothing was written")
    return [t.name for t in write_all({output / name: text for name, text in rendered.items()})]


def check(rendered: dict[str, str], output: Path, *, complete: bool) -> list[Difference]:
    """Compare the rendered text with what is on disk; `complete` also reports extra Dockerfiles."""
    import difflib  # `render --check` only: writing the Dockerfiles needs no diff

    diffs: list[Difference] = []
    for name, text in rendered.items():
        path = output / name
        if path.is_symlink():  # never followed: it could point at any file (a netrc), never quoted
            diffs.append(Difference(name, "unreadable", "a link, not followed: envbuild writes regular files"))
            continue
        if not path.exists():
            diffs.append(Difference(name, "missing", ""))
            continue
        try:
            current = read_user(path, str(path)).decode("utf-8")
        except EnvbuildError as exc:  # a folder, a FIFO, unreadable: not the rendered file
            diffs.append(Difference(name, "unreadable", str(exc).split(": ", 1)[-1]))
            continue
        except UnicodeDecodeError:
            diffs.append(Difference(name, "unreadable", "not UTF-8 text"))
            continue
        if current != text:
            if not current.startswith("# Generated by envbuild"):  # not ours: say so, quote nothing of it
                diffs.append(Difference(name, "stale", "not a Dockerfile envbuild rendered (its text is not shown)"))
                continue
            old, new = current.split("\n"), text.split("\n")
            changed = [
                ln for ln in difflib.unified_diff(old, new, lineterm="", n=0)
                if ln[:1] in "+-" and not ln.startswith(("+++", "---"))
            ]
            at = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), min(len(old), len(new)))
            # Only the rendered side is quoted (envbuild's own text), never what the file holds.
            ours = new[at][:100] if at < len(new) else "(the file is longer)"
            diffs.append(Difference(name, "stale", f"{len(changed)} line(s) differ, first at line {at + 1}, rendered: {ours}"))
    if complete and output.is_dir():
        for path in sorted(output.glob("*.Dockerfile")):
            if path.name not in rendered:
                diffs.append(Difference(path.name, "extra", "no backend in the matrix renders it"))
    return diffs

"""Validated backends -> Dockerfile text, written atomically and checked for staleness."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import jinja2

from envbuild.core.errors import EnvbuildError
from envbuild.core.files import read_user, write_all
from envbuild.core.imageref import Reference
from envbuild.core.settings import mirror_url
from envbuild.core.text import shown
from envbuild.matrix import stacks

if TYPE_CHECKING:
    from envbuild.matrix import Backend, Matrix

TEMPLATES = Path(__file__).parent / "templates"
# The uv cache logic of every install step: the build context carries it, and each step reads it (`. /run/uv-step.sh`).
UV_STEP = Path(__file__).parent / "scripts" / "uv-step.sh"
# The image's entrypoint: moves the caches when /cache cannot be written (a read-only image, any uid:gid); the build
# context carries it, the final stage copies it to /opt/envbuild/bin/envbuild-entrypoint.
ENTRYPOINT = Path(__file__).parent / "scripts" / "entrypoint.sh"
VENV = "/opt/venv"
CONSTRAINTS = "/opt/envbuild/constraints.txt"

TEMPLATE = "Dockerfile.j2"
# Strict: a name the template uses and render does not give is an error, never an empty string.
_ENVIRONMENT = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), undefined=jinja2.StrictUndefined,
                                  trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)


def dockerfile_name(backend: Backend) -> str:
    return f"{backend.name}.Dockerfile"


def index_urls(matrix: Matrix, backend: Backend) -> list[str]:
    """Every index a backend's lock may take a package from, the matrix's first, each once, as the matrix names them."""
    return list(dict.fromkeys(u for u in (matrix.index.url, *matrix.index.extra_urls, backend.torch.index_url,
                                          backend.plugin.index_url if backend.plugin else None) if u))


def render_backend(matrix: Matrix, backend: Backend, index_mirrors: tuple[tuple[str, str], ...] = ()) -> str:
    """The Dockerfile for one containerizable backend; same input, same bytes. `index_mirrors` (a site's settings:
    index URL -> mirror URL) turn the indexes the build asks into their mirrors; the committed Dockerfiles have none."""
    # torch from pip goes into a venv of our own; a vendor's torch stays in the vendor's environment
    # (a venv made on top of it would not see packages of a base that is itself a venv).
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
    # Every index the resolver may take a package from, torch's first, through the site's mirrors. Locked installs
    # ask none of them: each layer's pylock.toml names its files by URL and hash.
    indexes = [mirror_url(u, index_mirrors) for u in index_urls(matrix, backend)]
    index_args = " ".join([f'--index-url "{indexes[0]}"', *(f'--extra-index-url "{u}"' for u in indexes[1:])])
    torch_archs = bool(backend.host and stacks.STACKS[backend.host.stack].torch_archs)
    text = _ENVIRONMENT.get_template(TEMPLATE).render(
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
        uv=matrix.uv,
        torch_stage="torch" if torch_layers else "base",
        indexes=index_args,
        # uv 0.13 installs a pylock.toml as a preview feature (it warns otherwise); the URLs and hashes are the lock's
        locked="--preview-features pylock --no-index --require-hashes --no-deps",
        keep_base=backend.torch.source == "base" or bool(backend.plugin and backend.plugin.source == "base"),
        extras=matrix.packages_for(backend),
        constraints=CONSTRAINTS,
        # The probe's advice when the device is not visible: the flags the matrix says expose it.
        run_flags=" ".join(backend.run.docker_args()),
        version_tag=Reference.parse(matrix.tags(backend)[1]).tag,
        requires=stacks.needs(backend),
        # torch reports its own list for CUDA and ROCm only (an Ascend SoC family is the base's, not torch's).
        arch_want=" ".join(backend.host.arch if backend.host and torch_archs else ()),
        # The linux/arm64 build's own list where PyTorch builds another (CUDA 13 adds sm_110 there); not declared: the
        # arm64 build records torch's list without comparing it.
        arch_want_arm64=" ".join(backend.host.arch_arm64 if backend.host and torch_archs else ()),
        # NVIDIA_REQUIRE_CUDA: the major's first release (cuda>=12.0), not the base's own: the NVIDIA Container
        # Toolkit then starts the image on every driver that runs it under minor version compatibility.
        require_cuda=stacks.require_floor(stacks.STACKS[backend.host.stack], backend.host.version)
        if backend.host else None,
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

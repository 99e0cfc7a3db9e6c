"""`envbuild env`: a native virtual environment with the image's pins, for where no container can go (MPS on
macOS) or when a user wants no container.

It installs what the backend's image installs, in the same order and with the same constraints: torch from the
backend's index, the plugin at its pin, then transformers and accelerate at the matrix's pins. It also carries
the image's probe as DIR/bin/envbuild-probe, and records the pins in DIR/envbuild-env.json.

The environment is made in DIR.tmp-XXXXXX next to DIR and moved to DIR only once every pin has landed (the
probe's --versions-only check, the same gate the image build has): DIR never holds a half-made environment.
A venv records its own path in its scripts, so the move rewrites those paths (see `_relocate`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from envbuild.core import heartbeat
from envbuild.core.output import Scrubber
from envbuild.core.errors import EnvError, InvalidInput, NativeEnvRefused
from envbuild.matrix import Backend, Matrix
from envbuild.core.paths import PROBE as PROBE_FILE
from envbuild.core.text import unsafe_char, unsafe_message
from envbuild.core.platform import describe as _describe_platform
from envbuild.core.platform import host_platform

ENV_FILE = "envbuild-env.json"
CONSTRAINTS = "envbuild-constraints.txt"
PROBE = "envbuild-probe"
ENV_FORMAT = 1
MIN_PYTHON = (3, 10)  # transformers 5 needs 3.10


@dataclass(frozen=True)
class Install:
    """One `pip install`: packages, where torch comes from, and whether the torch/plugin constraints apply."""

    packages: tuple[str, ...]
    index_url: str | None = None
    extra_index_url: str | None = None
    constrained: bool = False
    why: str = ""


@dataclass
class Plan:
    backend: str
    device: str
    platform: str  # the platform this plan is for
    python: str
    dir: Path
    pins: dict[str, str]  # torch, plugin, transformers, accelerate: what the probe expects
    constraints: dict[str, str]  # torch and plugin: what later installs must not replace
    index_urls: dict[str, str | None]
    installs: list[Install]
    probe_args: list[str]
    probe_env: dict[str, str]
    notes: list[str] = field(default_factory=list)

    def commands(self, venv: Path | None = None) -> list[list[str]]:
        """The argv of each step, against `venv` (default: DIR)."""
        v = venv or self.dir
        py = str(v / "bin" / "python")
        # --prompt: the name activate shows must be DIR's, also while it is made under DIR.tmp-XXXXXX.
        cmds = [[self.python, "-m", "venv", "--prompt", self.dir.name, str(v)]]
        for step in self.installs:
            argv = [py, "-m", "pip", "install"]
            if step.index_url:
                argv += ["--index-url", step.index_url]
            if step.extra_index_url:
                argv += ["--extra-index-url", step.extra_index_url]
            if step.constrained:
                argv += ["--constraint", str(v / CONSTRAINTS)]
            cmds.append(argv + list(step.packages))
        return cmds

    def probe_command(self, venv: Path | None = None) -> list[str]:
        return [str((venv or self.dir) / "bin" / PROBE), *self.probe_args]

    def script(self) -> str:
        """The plan as shell lines: what `--dry-run` prints."""
        pins = ", ".join(f"{d} {v}" for d, v in self.pins.items())
        cmds = self.commands()
        lines = [
            f"# envbuild env --backend {self.backend} for {self.platform}: {pins}",
            f"# (made in {shlex.quote(str(self.dir))}.tmp-XXXXXX and moved to {shlex.quote(str(self.dir))} once every pin "
            "has landed)",
            shlex.join(cmds[0]),
            f"printf '%s\\n' {' '.join(shlex.quote(f'{d}=={v}') for d, v in self.constraints.items())}"
            f" > {shlex.quote(str(self.dir / CONSTRAINTS))}",
        ]
        for step, argv in zip(self.installs, cmds[1:]):
            if step.why:
                lines.append(f"# {step.why}")
            lines.append(shlex.join(argv))
        lines.append(f"# envbuild's probe, copied to {shlex.quote(str(self.dir / 'bin' / PROBE))}; the pins go to "
                     f"{shlex.quote(str(self.dir / ENV_FILE))}")
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.probe_env.items())
        lines.append(f"{env} {shlex.join(self.probe_command())}".strip())
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "device": self.device,
            "platform": self.platform,
            "dir": str(self.dir),
            "python": self.python,
            "pins": dict(self.pins),
            "index_urls": dict(self.index_urls),
            "commands": self.commands() + [self.probe_command()],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------------
# Planning (no side effects).


def _refuse_vendor_torch(backend: Backend) -> None:
    what = None
    if backend.torch.source == "base":
        what = f"its torch {backend.torch.version}"
        if backend.plugin and backend.plugin.source == "base":
            what += f" and {backend.plugin.package} {backend.plugin.version}"
    elif backend.plugin and backend.plugin.source == "base":
        what = f"its {backend.plugin.package} {backend.plugin.version}"
    if what:
        verb = "come" if " and " in what else "comes"
        raise NativeEnvRefused(
            f"backend '{backend.name}' has no native environment: {what} {verb} only inside the vendor's image "
            f"({backend.base_image or 'its base image'}), built for {backend.description}; pip would install a "
            f"different torch. Use the container: `envbuild build --backend {backend.name}` and "
            f"`envbuild smoke --backend {backend.name}`."
        )


def plan(
    matrix: Matrix,
    backend: Backend,
    directory: str | os.PathLike[str],
    *,
    python: str | None = None,
    host: str | None = None,
) -> Plan:
    """What `envbuild env` would do for `backend`: for this host, or for the backend's own platform when this host
    is not one of them (`check_host` refuses those). Refuses backends whose torch comes only in a vendor image."""
    _refuse_vendor_torch(backend)
    for option, value in (("--dir", os.fspath(directory)), ("--python", python or "")):
        if (ch := unsafe_char(value)) is not None:  # the plan is printed as a shell script
            raise InvalidInput(f"{option}: {unsafe_message(value, ch)}")
    if python and python.startswith("-"):
        raise InvalidInput(f"--python {python!r} starts with '-': it would be read as an option (give a path, e.g. ./{python})")
    host = host or host_platform()
    fits = host in backend.platforms
    target = host if fits else backend.platforms[0]
    exe = python or (sys.executable if fits else "python3")
    d = Path(directory).expanduser()
    d = d if d.is_absolute() else Path.cwd() / d

    constraints = {"torch": backend.torch.version}
    if backend.plugin:
        constraints[backend.plugin.package] = backend.plugin.version
    pins = {**constraints, "transformers": matrix.pin("transformers", backend), "accelerate": matrix.pin("accelerate", backend)}
    installs = [Install((f"torch=={backend.torch.version}",), index_url=backend.torch.index_url,
                        why="torch first, from the backend's index (as in its image)")]
    if backend.plugin:
        installs.append(Install((f"{backend.plugin.package}=={backend.plugin.version}",),
                                extra_index_url=backend.plugin.index_url, constrained=True,
                                why=f"{backend.plugin.package} pairs with exactly this torch; the constraints keep pip "
                                    "from replacing torch"))
    installs.append(Install((f"transformers=={pins['transformers']}", f"accelerate=={pins['accelerate']}"),
                            constrained=True, why="transformers and accelerate at the matrix's pins"))
    probe_args = ["--backend", backend.name, "--device", backend.device]
    if backend.import_module:
        probe_args += ["--plugin-import", backend.import_module]
    if backend.availability:
        probe_args += ["--availability", backend.availability]
    probe_args += ["--model", "synthetic", "--expect", *(f"{k}={v}" for k, v in pins.items())]
    probe_env = {**dict(backend.env), "HF_HUB_OFFLINE": "1"}
    notes = []
    if (backend.python.apt or backend.apt) and target.startswith("linux/"):
        extra = [p for p in (*backend.python.apt, *backend.apt) if p not in ("python3", "python3-venv")]
        if extra:
            notes.append(f"the image also installs {' '.join(extra)} (apt): this host needs them for {backend.description}")
    if backend.device != "cpu":
        notes.append(f"the probe's device check passes only on a host with {backend.description} "
                     "hardware (and its driver); it never falls back to the CPU")
    if not fits:
        notes.append(f"a plan for {_describe_platform(target)}: this host ({host}) would refuse it")
    return Plan(backend.name, backend.device, target, exe, d, pins, constraints,
                {"torch": backend.torch.index_url, **({"plugin": backend.plugin.index_url} if backend.plugin else {})},
                installs, probe_args, probe_env, notes)


def check_host(matrix: Matrix, backend: Backend, directory: str | os.PathLike[str], host: str | None = None) -> None:
    """Refuse, with the plan and what works here instead, when this host is not one of the backend's platforms."""
    host = host or host_platform()
    if host in backend.platforms:
        return
    wanted = " or ".join(_describe_platform(p) for p in backend.platforms)
    p = plan(matrix, backend, directory, host=host)
    why = ": MPS is Apple's Metal GPU, which only Macs with Apple Silicon have" if backend.device == "mps" else ""
    where = "a Mac with Apple Silicon" if backend.platforms == ("darwin/arm64",) else wanted
    lines = [f"backend '{backend.name}' needs {wanted}{why}; this host is {host}.",
             f"On {where}, `envbuild env --backend {backend.name}` would run:"]
    lines += ["  " + line for line in p.script().splitlines() if not line.startswith("#")]
    lines.append("On this host: the cpu image (`envbuild build --backend cpu`) or "
                 f"`envbuild env --backend cpu --dir {directory}`.")
    raise NativeEnvRefused("\n".join(lines))


# --------------------------------------------------------------------------------------------------
# Creating.


@dataclass
class EnvResult:
    plan: Plan
    python_version: str
    seconds: float
    probe: dict[str, Any] | None = None
    probe_error: str | None = None

    @property
    def ok(self) -> bool:
        return self.probe_error is None and (self.probe is None or bool(self.probe.get("ok")))

    def to_json(self) -> dict[str, Any]:
        return {**self.plan.to_json(), "python_version": self.python_version, "created": True, "ok": self.ok,
                "seconds": round(self.seconds, 1), "probe": self.probe, "probe_error": self.probe_error}


def _clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The caller's environment minus what would leak another Python into the venv's processes."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PIP_USER")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return {**env, **(extra or {})}


def _run(argv: list[str], echo: Callable[[str], None], verbose: bool, what: str) -> None:
    echo(f"[env] {what}: {shlex.join(argv)}")
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=_clean_env(), errors="replace")
    except OSError as exc:
        raise EnvError(f"{what}: cannot run {argv[0]}: {exc.strerror or exc}") from None
    tail: list[str] = []
    assert proc.stdout is not None
    wait = heartbeat.Waiting(lambda s: echo(f"[env] {s}"), what)  # pip may download gigabytes without -v's lines
    scrub = Scrubber()
    with heartbeat.beating(wait.tick):
        for line in proc.stdout:
            line = line.rstrip("\n")
            if verbose:
                echo(line)
                wait.spoke()
            if line.strip():
                wait.detail = scrub(line.strip())
            tail = (tail + [line])[-15:]
        rc = proc.wait()
    if rc != 0:
        shown = "\n".join("  " + t for t in tail if t.strip())
        hint = ""
        if "ensurepip" in shown or "No module named venv" in shown:
            hint = "\nInstall Python's venv support (Debian/Ubuntu: `sudo apt-get install python3-venv`) or pass --python."
        raise EnvError(f"{what} failed (exit code {proc.returncode}):\n{shown}{hint}")


def _python_version(exe: str) -> str:
    try:
        out = subprocess.run([exe, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"],
                             capture_output=True, text=True, timeout=60, env=_clean_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EnvError(f"--python {exe}: cannot run it ({exc})") from None
    version = out.stdout.strip()
    if out.returncode != 0 or not version:
        raise EnvError(f"--python {exe}: not a working Python ({out.stderr.strip()[-200:]})")
    if tuple(int(x) for x in version.split(".")[:2]) < MIN_PYTHON:
        raise EnvError(f"--python {exe} is Python {version}; transformers needs {'.'.join(map(str, MIN_PYTHON))} or later")
    return version


def _check_target(d: Path, force: bool) -> None:
    if d.is_symlink() or (d.exists() and not d.is_dir()):
        raise EnvError(f"{d} exists and is not a directory: pick another --dir")
    if not d.is_dir() or not any(d.iterdir()):
        return
    if not force:
        raise EnvError(f"{d} exists and is not empty: pass --force to replace the environment there, or pick another --dir")
    if not ((d / ENV_FILE).is_file() or (d / "pyvenv.cfg").is_file()):
        raise EnvError(f"{d} is not a virtual environment (no pyvenv.cfg): refusing to replace it even with --force")


def _install_probe(venv: Path, final: Path) -> None:
    source = PROBE_FILE.read_text(encoding="utf-8")
    body = source.split("\n", 1)[1] if source.startswith("#!") else source
    target = venv / "bin" / PROBE
    target.write_text(f"#!{final / 'bin' / 'python'}\n{body}", encoding="utf-8")
    target.chmod(0o755)


def _relocate(venv: Path, final: Path) -> None:
    """Rewrite the venv's own path in bin/ (script shebangs, activate*) and pyvenv.cfg before the move."""
    old, new = str(venv).encode(), str(final).encode()
    for p in [*sorted((venv / "bin").iterdir()), venv / "pyvenv.cfg"]:
        if p.is_symlink() or not p.is_file() or p.stat().st_size > 1 << 20:
            continue
        data = p.read_bytes()
        if old in data and (data.startswith(b"#!") or p.name.startswith("activate") or p.name == "pyvenv.cfg"):
            p.write_bytes(data.replace(old, new))


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _record(p: Plan, python_version: str, matrix: Matrix) -> dict[str, Any]:
    return {
        "envbuild_env": ENV_FORMAT,
        "backend": p.backend,
        "device": p.device,
        "platform": p.platform,
        "python": python_version,
        "pins": dict(p.pins),
        "index_urls": dict(p.index_urls),
        "matrix": matrix.path,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "probe": None,
    }


def run_probe(p: Plan, timeout: float = 900) -> tuple[dict[str, Any] | None, str | None]:
    """Run DIR/bin/envbuild-probe: (report, None), or (report or None, why it failed)."""
    argv = p.probe_command()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=_clean_env(p.probe_env), errors="replace")
    except subprocess.TimeoutExpired:
        return None, f"the probe did not finish within {timeout:g}s"
    except OSError as exc:
        return None, f"cannot run {argv[0]}: {exc}"
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = "\n".join(proc.stderr.strip().splitlines()[-10:])
        return None, f"the probe printed no JSON report (exit code {proc.returncode}):\n{tail}"
    if doc.get("ok") and proc.returncode == 0:
        return doc, None
    failed = next((f"{c['name']}: {c['message']}" for c in doc.get("checks", []) if not c.get("ok")),
                  f"exit code {proc.returncode}")
    return doc, failed


def create(
    matrix: Matrix,
    backend: Backend,
    directory: str | os.PathLike[str],
    *,
    python: str | None = None,
    force: bool = False,
    probe: bool = True,
    echo: Callable[[str], None] = lambda s: None,
    verbose: bool = False,
    host: str | None = None,
) -> EnvResult:
    """Make the environment at `directory` (see the module docstring); then run the probe unless probe=False."""
    check_host(matrix, backend, directory, host)
    p = plan(matrix, backend, directory, python=python, host=host)
    _check_target(p.dir, force)
    start = time.monotonic()
    version = _python_version(p.python)
    p.dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{p.dir.name}.tmp-", dir=p.dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    try:
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would hide the environment from other users
        cmds = p.commands(tmp)
        _run(cmds[0], echo, verbose, f"creating a Python {version} environment")
        (tmp / CONSTRAINTS).write_text("".join(f"{d}=={v}\n" for d, v in p.constraints.items()), encoding="utf-8")
        for step, argv in zip(p.installs, cmds[1:]):
            _run(argv, echo, verbose, "installing " + " ".join(step.packages))
        _install_probe(tmp, p.dir)
        pins = [f"{k}={v}" for k, v in p.pins.items()]
        _run([str(tmp / "bin" / "python"), str(tmp / "bin" / PROBE), "--backend", p.backend, "--device", p.device,
              "--versions-only", "--expect", *pins], echo, verbose, "checking the pins landed")
        _relocate(tmp, p.dir)
        _write_json(tmp / ENV_FILE, _record(p, version, matrix))
        _move_into_place(tmp, p.dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    echo(f"[env] {backend.name}: environment ready at {p.dir}")
    result = EnvResult(p, version, time.monotonic() - start)
    if probe:
        echo(f"[env] running the probe: {shlex.join(p.probe_command())}")
        with heartbeat.waiting(lambda s: echo(f"[env] {s}"), "running the probe"):
            result.probe, result.probe_error = run_probe(p)
        record = json.loads((p.dir / ENV_FILE).read_text(encoding="utf-8"))
        record["probe"] = {
            "ok": result.ok,
            "failed": [c["name"] for c in (result.probe or {}).get("checks", []) if not c.get("ok")],
            "error": result.probe_error,
        }
        _write_json(p.dir / ENV_FILE, record)
    result.seconds = time.monotonic() - start
    return result


def _move_into_place(tmp: Path, final: Path) -> None:
    old = None
    if final.is_dir() and any(final.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f"{final.name}.old-", dir=final.parent))
        final.replace(old / final.name)
    elif final.is_dir():
        final.rmdir()
    try:
        tmp.replace(final)
    except OSError as exc:
        if old is not None:
            (old / final.name).replace(final)
            old.rmdir()
        raise EnvError(f"cannot move the new environment to {final}: {exc.strerror or exc}") from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)

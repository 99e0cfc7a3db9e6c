"""The benchmark: is a rebuild seconds, is the image lean, is the CLI quick? Every figure is a ratio to (or,
for the no-op, a difference from) a baseline measured in the same run, on the same engine, with the same
interpreter, so a noisy machine moves both sides.

    python benchmarks/bench.py [--quick] [--json-file FILE] [--base IMAGE] [--wheelhouse DIR] [--ca-bundle FILE]

Run it from a checkout. It builds the cpu backend through the CLI, as a user does: every envbuild it times is
the one `pip install`ed from this checkout into a clean venv (~/.cache/envbuild/bench/venv), never the checkout itself. Without --base it makes
its own base (a debootstrap Debian with python3, served by a loopback registry; see tests/support/testbed.py);
without --wheelhouse it puts torch's CPU wheel from this machine's pip into one.

Rows (targets from the performance issue):
  lock      `envbuild lock --upgrade`: resolving the lock in the base (no target: it runs when asked, or when
            a build finds its lock missing or stale);
  cold      `envbuild build --no-cache` with empty cache mounts, from the lock: a fresh ENVBUILD_CACHE_ID
            build arg names new BuildKit cache mounts (uv, pip, apt), so nothing downloaded before is reused
            and no cache of anyone else's is deleted;
  bump      the same build after changing only the transformers pin and locking it (`build --locked`: no
            resolution in the build), / cold (target <= 0.05);
  noop      the same build again, nothing changed, - `docker build` of an unchanged trivial Dockerfile
            (FROM base + LABEL) with the same client (target: at most 0.3 s more); the engine part (the
            generated Dockerfile and context through the same client, without envbuild's Python) is shown apart;
  size      image size / (base image + the installed Python packages, measured in the image) (<= 1.05);
  smoke     `envbuild smoke` (one container, every check, torch.compile included) / `docker run IMAGE python -c
            "import torch"` (target <= 8), with where the time goes;
  help      `envbuild --help` / `python -c "import click"` (target <= 1.5), both in a clean venv where envbuild
            is installed from this checkout, not editable (what a user's `pip install` gives; kept in
            ~/.cache/envbuild/bench/venv, envbuild reinstalled each run);
  render    `envbuild render` of all backends (the matrix loaded and validated, the template run: nothing is
            cached between runs), / the same baseline (no target: shown, not bound);
  publish   `envbuild publish` of the built image to a loopback registry of the benchmark's own, twice: the second
            finds its content tag there and only moves the tags (target: at most 5 s, no layer uploaded), / the
            first (a full push);
  anchor_*  a hand-written Dockerfile of the same image (benchmarks/handwritten.Dockerfile: one apt layer, a venv
            with uv, torch, then transformers and accelerate as ARGs), built in the same run from the same base,
            wheelhouse and CA bundle: envbuild's cold build / its cold build (target <= 1.3), bump / its bump
            (<= 1.0; envbuild's lock is made before the clock), container start `import torch, transformers`
            (median, interleaved; <= 1.0), cold build + ten starts (<= 1.0), image size (<= 1.0).
Timings are medians of several runs (--quick: each build, start and smoke once, the CLI's start-ups three
times; CI runs it so, to prove every row's code path). Nothing is asserted: machines are noisy.

Cleanup: the images it tagged (envbuild-bench/...) and the build-cache records its run created (layers and
cache mounts) are removed at the end (--keep leaves them), its registry stopped; its build context in
~/.cache/envbuild/bench stays (reused by the next run). Its layers left in, a builder that keeps a few GB of
cache evicts the user's own layers first: their next "cached" build runs again, and makes another image.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPOSITORY = "envbuild-bench/envbuild"
NOOP_TAG = "envbuild-bench/noop:latest"
HAND_TAG = "envbuild-bench/handwritten:cpu"  # the anchor: benchmarks/handwritten.Dockerfile
CHECKOUT = Path(__file__).resolve().parents[1]
STEP_PREFIX = "[cpu] "
sys.path.insert(0, str(CHECKOUT / "tests"))  # the test bed: a local registry, a debootstrap base, a wheelhouse

# Measures a Python environment inside an image: the bytes under its site-packages folders (hard links
# once) and how many of them are bytecode. Run with the image's python; folders given as arguments are
# measured instead (the image's folders, in its base: a vendor base carries packages of its own).
_SIZE_SCRIPT = r"""
import json, os, site, sys
dirs = sys.argv[1:] or [os.path.realpath(d) for d in site.getsitepackages()]
dirs = [p for p in dict.fromkeys(dirs) if os.path.isdir(p)]
seen, total, pyc = set(), 0, 0
for top in dirs:
    for root, subdirs, files in os.walk(top):
        for name in files + subdirs:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
            if name.endswith(".pyc"):
                pyc += st.st_size
print(json.dumps({"dirs": dirs, "bytes": total, "pyc": pyc}))
"""


@dataclass
class Row:
    key: str
    what: str
    value: float
    baseline: float | None
    unit: str
    target: float | None = None  # the ratio to stay at or under
    detail: dict[str, Any] = field(default_factory=dict)
    margin: float | None = None  # instead of a ratio: at most this much more than the baseline (seconds)
    absolute: float | None = None  # instead of either: at most this value (seconds)
    holds: bool = True  # what the figure stands for happened (publish: the second push uploaded nothing)

    @property
    def ratio(self) -> float | None:
        return round(self.value / self.baseline, 3) if self.baseline else None

    @property
    def over(self) -> float | None:
        return round(self.value - self.baseline, 3) if self.baseline is not None else None

    @property
    def met(self) -> bool | None:
        if self.absolute is not None:
            return self.value <= self.absolute and self.holds
        if self.margin is not None and self.over is not None:
            return self.over <= self.margin
        return None if self.target is None or self.ratio is None else self.ratio <= self.target

    def to_json(self) -> dict[str, Any]:
        doc = asdict(self)
        doc.update(ratio=self.ratio, over=self.over, met=self.met)
        return doc


# Start-up: `envbuild --help` within 1.5x of `python -c "import click"` (completion runs it on every Tab). A render's
# start-up is shown beside it, with no bound (issue 50).
HELP_BOUND = 1.5


class BenchError(RuntimeError):
    pass


# --- running things and timing them --------------------------------------------------------------------


def _env() -> dict[str, str]:
    """The environment for envbuild subprocesses: the clean venv's envbuild (below), nothing from PYTHONPATH."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}




def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 3600,
        check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - start
    if check and proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-25:])
        raise BenchError(f"`{' '.join(argv[:6])} ...` exited with {proc.returncode}:\n{tail}")
    return seconds, proc


def median_time(argv: list[str], repeat: int, **kw: Any) -> tuple[float, list[float]]:
    times = [run(argv, **kw)[0] for _ in range(repeat)]
    return statistics.median(times), [round(t, 3) for t in times]


def interleaved(commands: dict[str, list[str]], repeat: int, **kw: Any) -> dict[str, tuple[float, list[float]]]:
    """Each command's median time, the commands taking turns (a ratio between them is then fair on a busy machine)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    run(next(iter(commands.values())), **kw)  # the first start pays for cold file caches
    for _ in range(repeat):
        for name, argv in commands.items():
            times[name].append(run(argv, **kw)[0])
    return {name: (statistics.median(t), [round(x, 3) for x in t]) for name, t in times.items()}


def clean_venv(folder: Path) -> Path:
    """A venv with envbuild installed from this checkout as a user gets it (`pip install`, not editable); its
    dependencies are installed once and kept, envbuild itself is reinstalled every run."""
    python = folder / "bin" / "python"
    if not python.exists():
        run([sys.executable, "-m", "venv", str(folder)])
        run([str(python), "-m", "pip", "install", "-q", str(CHECKOUT)], timeout=900)
    run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(CHECKOUT)], timeout=900)
    return folder


def steps_from(output: str) -> list[dict[str, Any]]:
    """'[cpu] torch 1/1 RUN ... ... DONE 8.7s' -> [{'step': 'torch 1/1 RUN ...', 'seconds': 8.7}]."""
    steps = []
    for line in output.splitlines():
        if line.startswith(STEP_PREFIX) and " ... DONE " in line:
            text, _, done = line[len(STEP_PREFIX):].rpartition(" ... DONE ")
            try:
                seconds = float(done.rstrip("s"))
            except ValueError:
                continue
            if seconds >= 0.05:
                steps.append({"step": " ".join(text.split())[:70], "seconds": seconds})
    return steps


# --- the engine ------------------------------------------------------------------------------------------


def _docker_client():
    from envbuild.engine.docker import Engine

    return Engine.connect().client  # the SDK client itself: the benchmark asks what envbuild never needs


def _image_size(client, ref: str) -> int:
    return int(client.api.inspect_image(ref)["Size"])


def _python_env_size(client, image: str, python: str, dirs: list[str] = ()) -> dict[str, Any]:
    out = client.containers.run(image, [python, "-c", _SIZE_SCRIPT, *dirs], remove=True, stderr=False,
                                entrypoint="", network_disabled=True)
    return json.loads(out)


def _build_cache(client) -> list[dict[str, Any]] | None:
    """BuildKit's cache records, or None when the engine cannot count them.

    Docker 20.10 answers 500 "failed to get usage ...: snapshot ... not found" once a record lost its
    snapshot (moby/buildkit#3599), sometimes for a moment, sometimes until a prune; the records only
    serve cleanup and a note, so the timings go on without them.
    """
    for attempt in range(3):
        try:
            return client.api.df().get("BuildCache") or []
        except Exception as exc:  # docker.errors.APIError; the SDK is imported lazily
            error = exc
            time.sleep(1 + attempt)
    print(f"bench: note: the engine cannot list its build cache ({str(error).splitlines()[0][:200]}); "
          "the cold build's cache mounts are left in place", file=sys.stderr)
    return None


def _cache_records(client) -> dict[str, str] | None:
    """BuildKit's cache records: id -> type (None: unknown)."""
    records = _build_cache(client)
    return None if records is None else {r["ID"]: r.get("Type", "") for r in records}


def _cache_bytes(client, ids: set[str]) -> int | None:
    records = _build_cache(client)
    return None if records is None else sum(int(r.get("Size") or 0) for r in records if r["ID"] in ids)


def _prune_cache_records(client, ids: set[str]) -> int:
    """Remove these build-cache records (all=True: also those sharing layers with an image); the bytes freed."""
    freed = 0
    for rid in sorted(ids):
        try:
            done = client.api.prune_builds(filters={"id": rid}, all=True)
            freed += int((done or {}).get("SpaceReclaimed") or 0)
        except Exception:  # a record still in use by someone else's build: leave it
            pass
    return freed


def _busy(client) -> list[str]:
    """Other containers running now (their builds and smoke tests make every timing noisier)."""
    try:
        return [c.name for c in client.containers.list()]
    except Exception:
        return []


# --- the benchmark -----------------------------------------------------------------------------------------


@dataclass
class Setup:
    base: str
    wheelhouse: Path
    ca_bundle: Path | None
    matrix: Path
    work: Path
    registry: Any = None


def prepare(args: argparse.Namespace, work: Path, client) -> Setup:
    from support import testbed

    from envbuild import matrix as matrix_mod

    registry = None
    base = args.base
    if not base:
        print("bench: making the base (debootstrap Debian + python3, cached) in a loopback registry ...", file=sys.stderr)
        registry = testbed.start_registry(work / "registry")
        base = testbed.push_base(registry, client)[0]
    wheelhouse = args.wheelhouse
    if not wheelhouse:
        print(f"bench: wheelhouse with torch {testbed.TORCH} from this machine's pip ...", file=sys.stderr)
        wheelhouse = testbed.make_wheelhouse(work / "wheelhouse")
    ca = None if args.no_ca_bundle else (args.ca_bundle or testbed.host_ca_bundle())
    m = Path(args.matrix or matrix_mod.default_path()).resolve()
    return Setup(base, Path(wheelhouse).resolve(), Path(ca).resolve() if ca else None, m, work, registry)


def cleanup(client, setup: Setup | None, info: dict[str, Any]) -> None:
    """Remove what the benchmark made: its images and tags, and the cache mounts of its cold build."""
    refs = [NOOP_TAG, HAND_TAG]
    try:  # only our tags: an image identical to one of the user's (same Dockerfile) carries theirs too
        refs += [tag for img in client.images.list(name=REPOSITORY) for tag in img.tags if tag.startswith(REPOSITORY + ":")]
    except Exception:
        pass
    if info.get("publish_repository"):  # what publish tagged locally for its pushes
        try:
            refs += [t for img in client.images.list() for t in img.tags if t.startswith(info["publish_repository"] + ":")]
        except Exception:
            pass
    if setup and setup.registry:  # the tags naming our registry's port; the image stays for the tests
        refs += [setup.base, f"{setup.registry.host}/library/debian:bookworm-slim"]
    for ref in refs:
        try:
            client.images.remove(ref)
        except Exception:
            pass
    if info.get("cache_mounts"):
        info["cache_mounts_freed"] = _prune_cache_records(client, set(info["cache_mounts"]))


# Repetitions of each timed command: (builds and container starts, CLI start-ups, smoke runs). --quick is CI's
# run of the benchmark (tests/engine/test_bench.py): every row's code path once, its figures single runs (noisier;
# nothing is asserted on them), which keeps about a minute of repetitions out of CI's budget.
FULL = (7, 15, 3)
QUICK = (1, 3, 1)


def measure(args: argparse.Namespace, s: Setup, client, info: dict[str, Any]) -> list[Row]:
    from support import testbed

    from envbuild.image import plan as plan_mod
    from envbuild import matrix as matrix_mod
    from envbuild.engine.docker import find_builder
    from envbuild.engine.docker import Engine
    from envbuild.core.paths import cache_dir

    reps, cli_reps, smoke_reps = (QUICK if args.quick else FULL)
    # Every timed envbuild command is the clean venv's (`pip install` of this checkout, as a user has it, bytecode
    # compiled at install): a checkout run with `python -m` compiles its sources on every start where bytecode is
    # not written (PYTHONDONTWRITEBYTECODE), 70 ms that no user pays.
    print("bench: a clean venv with envbuild installed from this checkout ...", file=sys.stderr)
    venv = clean_venv(cache_dir("bench") / "venv")

    def envbuild_argv(*args: str) -> list[str]:
        return [str(venv / "bin" / "envbuild"), *args]

    env = _env()
    # A folder that stays from run to run: the build context lives under it, and BuildKit keeps one record
    # of a context per folder (a new folder each run would leave 200 MB of wheelhouse behind every time).
    cwd = cache_dir("bench")
    cwd.mkdir(parents=True, exist_ok=True)
    overrides = testbed.cpu_overrides(s.base, repository=REPOSITORY)
    m = matrix_mod.load(s.matrix, [o for o in overrides if o != "--set"])
    bump_to = args.bump_to or ("5.22.0" if m.transformers != "5.22.0" else "5.21.0")
    cache_id = f"bench-{uuid.uuid4().hex[:8]}"
    inputs = ["--backend", "cpu", "--matrix", str(s.matrix), *overrides, "--wheelhouse", str(s.wheelhouse)]
    inputs += ["--ca-bundle", str(s.ca_bundle)] if s.ca_bundle else ["--no-ca-bundle"]
    common = [*inputs, "--build-arg", f"ENVBUILD_CACHE_ID={cache_id}"]
    builder = find_builder()
    rows: list[Row] = []
    info.update(cache_id=cache_id, bump=f"{m.transformers} -> {bump_to}", builder=builder.describe())

    # lock: resolving in the base (pip's dry run there); never part of a build that has its lock
    print("bench: resolving the lock ...", file=sys.stderr)
    resolve, proc = run(envbuild_argv("lock", *inputs, "--upgrade"), cwd=cwd, env=env)
    rows.append(Row("lock", "`envbuild lock --upgrade` (resolving in the base, pip's dry run)", round(resolve, 2), None, "s",
                    detail={"steps": steps_from(proc.stderr)}))

    # cold: no layer cache (--no-cache) and new, empty cache mounts (a fresh ENVBUILD_CACHE_ID)
    print("bench: cold build ...", file=sys.stderr)
    records_before = _cache_records(client)
    cold, proc = run(envbuild_argv("build", *common, "--no-cache"), cwd=cwd, env=env)
    records_after = _cache_records(client) if records_before is not None else None
    info["cache_mounts"] = sorted(r for r, kind in (records_after or {}).items()
                                  if kind == "exec.cachemount" and r not in records_before)
    rows.append(Row("cold", "cold build (no cache, empty cache mounts)", round(cold, 2), None, "s",
                    detail={"steps": steps_from(proc.stderr)}))

    print(f"bench: transformers {bump_to} ...", file=sys.stderr)
    relock, _ = run(envbuild_argv("lock", *inputs, "--set", f"transformers.version={bump_to}"), cwd=cwd, env=env)
    bump, proc = run(envbuild_argv("build", *common, "--locked", "--set", f"transformers.version={bump_to}"), cwd=cwd, env=env)
    rows.append(Row("bump", f"rebuild after a transformers-only bump ({m.transformers} -> {bump_to}) from its lock, / cold",
                    round(bump, 2), round(cold, 2), "s", 0.05, {"steps": steps_from(proc.stderr), "relock": round(relock, 2)}))

    print("bench: unchanged rebuilds ...", file=sys.stderr)
    noop_argv = envbuild_argv("build", *common, "--set", f"transformers.version={bump_to}")
    noop, noop_runs = median_time(noop_argv, reps, cwd=cwd, env=env)
    trivial_dir = s.work / "trivial"
    trivial_dir.mkdir(exist_ok=True)
    (trivial_dir / "Dockerfile").write_text(f"FROM {s.base}\nLABEL dev.envbuild.bench=noop\n")
    benv = {**os.environ, **dict(builder.env)}
    trivial_argv = [*builder.argv, "-q", "-t", NOOP_TAG, str(trivial_dir)]
    run(trivial_argv, env=benv)  # the first one builds; the timed ones are no-ops
    trivial, trivial_runs = median_time(trivial_argv, reps, env=benv)
    # The engine part: the generated Dockerfile and context through the same client, without envbuild.
    opts = plan_mod.BuildOptions(ca_bundle=s.ca_bundle, build_args=(f"ENVBUILD_CACHE_ID={cache_id}",),
                                  wheelhouse=s.wheelhouse, context_dir=cwd / ".envbuild" / "context")
    mb = matrix_mod.load(s.matrix, [o for o in overrides if o != "--set"] + [f"transformers.version={bump_to}"])
    planned = plan_mod.make_plan(mb, mb.backend("cpu"), opts, Engine())
    engine_part, engine_runs = median_time([*planned.argv[:-1], "--iidfile", str(s.work / "iid"), planned.argv[-1]],
                                           reps, env=benv, cwd=cwd)
    rows.append(Row("noop", "rebuild with nothing changed, - `docker build` of an unchanged trivial Dockerfile",
                    round(noop, 3), round(trivial, 3), "s", margin=0.3,
                    detail={"runs": noop_runs, "baseline_runs": trivial_runs, "engine_part": round(engine_part, 3),
                            "engine_part_runs": engine_runs, "engine_part_ratio": round(engine_part / trivial, 3),
                            "python_start": None}))

    print("bench: image size ...", file=sys.stderr)
    image = f"{REPOSITORY}:cpu"
    size = _image_size(client, image)
    base_size = _image_size(client, s.base)
    b = mb.backend("cpu")
    python = "/opt/venv/bin/python" if b.torch.source == "pip" else b.python.executable
    inside = _python_env_size(client, image, python)
    try:  # the same folders in the base (a vendor base carries packages of its own)
        base_pkgs = _python_env_size(client, s.base, "python3", inside["dirs"])["bytes"]
    except Exception:  # no python3 in the base: nothing of it to subtract
        base_pkgs = 0
    packages = inside["bytes"] - base_pkgs
    # What torch.compile needs (the matrix's compile.apt) is asked for: its apt layer (with the distribution's Python
    # where the base lacks one) is reported apart.
    toolchain = sum(int(h.get("Size") or 0) for h in client.api.history(image)
                    if b.compile.apt and all(p in (h.get("CreatedBy") or "") for p in b.compile.apt))
    rows.append(Row("size", "image size, / (base image + installed Python packages + compile toolchain)", size,
                    base_size + packages + toolchain, "B", 1.05,
                    {"base": base_size, "packages": packages, "bytecode": inside["pyc"], "toolchain": toolchain,
                     "toolchain_packages": list(b.compile.apt), "overhead": size - base_size - packages - toolchain,
                     "site_packages": inside["dirs"]}))

    print("bench: smoke ...", file=sys.stderr)
    smoke_runs, smoke_docs = [], []
    for i in range(smoke_reps):  # each run's own report: the breakdown below is of one run, not a mix
        smoke_json = s.work / f"smoke-{i}.json"
        seconds, _ = run(envbuild_argv("smoke", "--backend", "cpu", "--matrix", str(s.matrix), *overrides,
                                       "--set", f"transformers.version={bump_to}", "--json-file", str(smoke_json)), cwd=cwd, env=env)
        smoke_runs.append(round(seconds, 3))
        smoke_docs.append(json.loads(smoke_json.read_text()))
    smoke = statistics.median(smoke_runs)
    docker = builder.argv[0]
    bare, bare_runs = median_time([docker, "run", "--rm", image, "python", "-c", "import torch"], max(reps, smoke_reps))
    # Where the time goes, in the run nearest the median, outside in: envbuild's CLI (Python, the docker SDK),
    # the container's start and removal, the probe's interpreter start, then each check (import_torch, load, ...).
    at = min(range(len(smoke_runs)), key=lambda i: abs(smoke_runs[i] - smoke))
    total, doc = smoke_runs[at], smoke_docs[at]
    probe_total = ((doc.get("probe") or {}).get("timings") or {}).get("total") or 0.0
    parts = {"envbuild CLI": round(max(total - doc.get("seconds", total), 0.0), 3),
             "container start/stop": round(max(doc.get("seconds", total) - probe_total, 0.0), 3)}
    checks = {c["name"]: c.get("seconds") or 0.0 for c in doc.get("checks") or []}
    parts["probe start"] = round(max(probe_total - sum(checks.values()), 0.0), 3)
    parts.update((k, round(v, 3)) for k, v in checks.items())
    rows.append(Row("smoke", 'smoke (one pass, as an arbitrary uid), / `docker run IMAGE python -c "import torch"`',
                    round(smoke, 2), round(bare, 2), "s", 8.0, {"runs": smoke_runs, "baseline_runs": bare_runs, "where": parts}))

    print("bench: CLI start-up (a clean venv, envbuild installed from this checkout) ...", file=sys.stderr)
    bare_py, py_runs = median_time([str(venv / "bin" / "python"), "-c", "pass"], cli_reps, env=env)
    out = s.work / "rendered"
    # Interleaved, so that a moment of load elsewhere falls on every command alike.
    render_argv = [str(venv / "bin" / "envbuild"), "render", "--matrix", str(s.matrix), "--output", str(out)]
    timed = interleaved({"click": [str(venv / "bin" / "python"), "-c", "import click"],
                         "help": [str(venv / "bin" / "envbuild"), "--help"],
                         "render": render_argv},
                        cli_reps, env=env, cwd=cwd)
    (click_t, click_runs), (help_t, help_runs), (render_t, render_runs) = timed["click"], timed["help"], timed["render"]
    rows.append(Row("help", '`envbuild --help`, / `python -c "import click"` (clean venv, not editable)', round(help_t, 3),
                    round(click_t, 3), "s", HELP_BOUND, {"runs": help_runs, "baseline_runs": click_runs, "python_start": round(bare_py, 3)}))
    rows.append(Row("render", f'`envbuild render` ({len(m.containerizable())} backends), / `python -c "import click"`',
                    round(render_t, 3), round(click_t, 3), "s", None, {"runs": render_runs}))
    # What any Python CLI pays before its first line of work: the floor under the no-op row.
    next(r for r in rows if r.key == "noop").detail["python_start"] = round(bare_py, 3)
    rows.append(publish_twice(s, envbuild_argv, noop_argv, overrides, bump_to, cwd, env, info))
    rows += anchor(s, m, bump_to, builder, rows, reps=1 if args.quick else 5)
    return rows


def publish_twice(s: Setup, envbuild_argv: Any, build_argv: list[str], overrides: list[str], bump_to: str, cwd: Path,
                  env: dict[str, str], info: dict[str, Any]) -> Row:
    """The content-addressed publish: the same cell published twice to a loopback registry of the benchmark's own;
    the second only moves the tags (its content tag is there)."""
    from support import testbed

    print("bench: publish, twice (a loopback registry of its own) ...", file=sys.stderr)
    # As a user publishes: what `envbuild build` tagged (the no-op row's bare `docker build` of the plan tagged an
    # image without the content label over it); a cached build, not timed.
    run(build_argv, cwd=cwd, env=env)
    registry = testbed.start_registry(s.work / "publish-registry")
    repo = f"{registry.host}/envbuild-bench"
    info["publish_repository"] = repo
    argv = envbuild_argv("publish", "--backend", "cpu", "--matrix", str(s.matrix), *overrides,
                         "--set", f"transformers.version={bump_to}", "--registry", repo, "--force",
                         "--manifest", str(s.work / "publish-manifest.json"))
    try:
        first, p1 = run(argv, cwd=cwd, env=env)
        again, p2 = run(argv, cwd=cwd, env=env)
    finally:
        registry.stop()
    skipped = "unchanged since" in p2.stderr and "pushing" not in p2.stderr
    return Row("publish", "`envbuild publish` of an unchanged cell again (content tag there: tags moved, nothing "
                          "uploaded), / the first, full push", round(again, 2), round(first, 2), "s",
               detail={"skipped": skipped, "first": round(first, 2),
                       "said": [ln for ln in p2.stderr.splitlines() if ln.startswith("[cpu]")][:3]}, absolute=5.0,
               holds=skipped)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system
        shutil.copy2(src, dst)


def anchor(s: Setup, m: Any, bump_to: str, builder: Any, rows: list[Row], reps: int) -> list[Row]:
    """The hand-written Dockerfile (benchmarks/handwritten.Dockerfile, in the style of Hugging Face's torch-light
    CI image) built in this run from the same base, wheelhouse, CA bundle and pins: cold, after the same bump,
    container start, cold build plus ten starts, and size, each envbuild's / the anchor's."""
    from support import testbed

    print("bench: the hand-written anchor (cold, bump, start, size) ...", file=sys.stderr)
    folder = s.work / "handwritten"
    folder.mkdir(exist_ok=True)
    shutil.copyfile(CHECKOUT / "benchmarks" / "handwritten.Dockerfile", folder / "Dockerfile")
    shutil.copytree(s.wheelhouse, folder / "wheelhouse", copy_function=_link_or_copy, dirs_exist_ok=True)
    benv = {**os.environ, **dict(builder.env)}
    secret = ["--secret", f"id=ca_bundle,src={s.ca_bundle}"] if s.ca_bundle else []
    run_id = uuid.uuid4().hex[:8]

    def build(transformers: str, *extra: str) -> float:
        seconds, _ = run([*builder.argv, "-q", "-t", HAND_TAG, *extra, *secret, "--build-arg", f"BASE={s.base}",
                          "--build-arg", f"TORCH={testbed.TORCH}", "--build-arg", f"TRANSFORMERS={transformers}",
                          "--build-arg", f"ACCELERATE={m.accelerate}", "--build-arg", f"BENCH_RUN={run_id}",
                          str(folder)], env=benv)
        return seconds

    by = {r.key: r for r in rows}
    cold_hand = build(m.transformers, "--no-cache")
    bump_hand = build(bump_to)
    docker = builder.argv[0]
    starts = interleaved({name: [docker, "run", "--rm", ref, "python", "-c", "import torch, transformers"]
                          for name, ref in (("envbuild", f"{REPOSITORY}:cpu"), ("hand", HAND_TAG))}, reps)
    (start_env, env_runs), (start_hand, hand_runs) = starts["envbuild"], starts["hand"]
    client = _docker_client()
    cold_env, bump_env = by["cold"].value, by["bump"].value
    return [
        Row("anchor_cold", "cold build, / the hand-written Dockerfile's (benchmarks/handwritten.Dockerfile)",
            cold_env, round(cold_hand, 2), "s", 1.3),
        Row("anchor_bump", "transformers bump (lock made before the clock), / the hand-written file's",
            bump_env, round(bump_hand, 2), "s", 1.0),
        Row("anchor_start", "container start, `import torch, transformers` (median), / the hand-written image's",
            round(start_env, 2), round(start_hand, 2), "s", 1.0, {"runs": env_runs, "baseline_runs": hand_runs}),
        Row("anchor_cold10", "cold build + ten starts, / the hand-written image's",
            round(cold_env + 10 * start_env, 2), round(cold_hand + 10 * start_hand, 2), "s", 1.0),
        Row("anchor_size", "image size, / the hand-written image's", _image_size(client, f"{REPOSITORY}:cpu"),
            _image_size(client, HAND_TAG), "B", 1.0),
    ]


# --- output --------------------------------------------------------------------------------------------


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "B":
        return f"{value / 1e6:,.0f} MB"
    return f"{value:.2f} s" if value >= 1 else f"{value * 1000:.0f} ms"


def table(rows: list[Row]) -> str:
    from envbuild.report.report import table as render_table

    out = []
    for r in rows:
        target = (f"<= {r.absolute:g} s" if r.absolute is not None else f"<= +{r.margin:g} s" if r.margin is not None
                  else f"<= {r.target:g}" if r.target is not None else "-")
        verdict = {True: "yes", False: "NO", None: "-"}[r.met]
        ratio = f"{r.ratio:.3g}" if r.ratio is not None else "-"
        if r.margin is not None and r.over is not None:
            ratio += f" (+{r.over * 1000:.0f} ms)"
        out.append({"measure": r.what, "value": _fmt(r.value, r.unit), "baseline": _fmt(r.baseline, r.unit),
                    "ratio": ratio, "target": target, "met": verdict})
    text = render_table(out, ["measure", "value", "baseline", "ratio", "target", "met"])
    notes = []
    by = {r.key: r for r in rows}
    if "cold" in by and by["cold"].detail.get("steps"):
        top = sorted(by["cold"].detail["steps"], key=lambda s: -s["seconds"])[:4]
        notes.append("cold build, slowest steps: " + "; ".join(f"{s['step'][:40]} {s['seconds']:.1f}s" for s in top))
    if "bump" in by and by["bump"].detail.get("steps"):
        notes.append("bump rebuilt: " + "; ".join(f"{s['step'][:40]} {s['seconds']:.1f}s" for s in by["bump"].detail["steps"])
                     + f" (its lock took {by['bump'].detail['relock']:.1f}s to resolve, before the build)")
    if "noop" in by:
        d = by["noop"].detail
        notes.append(f"no-op: the engine part (generated Dockerfile + context, same client, no envbuild) takes "
                     f"{_fmt(d['engine_part'], 's')} ({d['engine_part_ratio']:.2g}x the trivial build); `python -c pass` "
                     f"alone takes {_fmt(d['python_start'], 's')}")
    if "size" in by:
        d = by["size"].detail
        notes.append(f"size: base {_fmt(d['base'], 'B')}, packages {_fmt(d['packages'], 'B')} (of which bytecode "
                     f"{_fmt(d['bytecode'], 'B')}), the apt layer with torch.compile's toolchain ({' '.join(d['toolchain_packages']) or 'none'}) "
                     f"{_fmt(d['toolchain'], 'B')}, everything else {d['overhead'] / 1e6:,.1f} MB")
    if "help" in by and "render" in by:
        said = [f"{key} {by[key].ratio:.2f}x of `import click`"
                + (f" (bound {by[key].target:g}x: {'met' if by[key].met else 'NOT met'})" if by[key].target else "")
                for key in ("help", "render") if by[key].ratio is not None]
        notes.append("start-up, medians of the same interleaved run: " + "; ".join(said))
    if "smoke" in by:
        w = by["smoke"].detail["where"]
        notes.append("smoke, where the time goes: " + ", ".join(f"{k} {v:.2f}s" for k, v in w.items() if v >= 0.005))
    return text + "\n\n" + "\n".join(f"- {n}" for n in notes)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python benchmarks/bench.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="Rows and their baselines: see the module docstring.")
    p.add_argument("--quick", action="store_true", help="fewer repetitions (CI); every row is still measured")
    p.add_argument("--json-file", dest="json_path", type=Path, help="also write the results as JSON to this file")
    p.add_argument("--base", help="base image for the cpu backend (default: a debootstrap Debian in a loopback registry)")
    p.add_argument("--wheelhouse", type=Path, help="a folder with torch's CPU wheel (default: made from this machine's pip)")
    p.add_argument("--ca-bundle", type=Path, help="CA bundle for the builds (default: the host's)")
    p.add_argument("--no-ca-bundle", action="store_true", help="pass no CA bundle")
    p.add_argument("--matrix", type=Path, help="the matrix (default: as envbuild finds it)")
    p.add_argument("--bump-to", help="the transformers release of the bump (default: 5.22.0)")
    p.add_argument("--keep", action="store_true", help="keep the images and cache mounts it made")
    args = p.parse_args(argv)

    client = _docker_client()
    work = Path(tempfile.mkdtemp(prefix="envbuild-bench-"))
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    busy = _busy(client)
    load_at_start = os.getloadavg()
    records_at_start = _cache_records(client)
    setup = None
    rows: list[Row] = []
    info: dict[str, Any] = {}
    try:
        setup = prepare(args, work, client)
        rows = measure(args, setup, client, info)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            cleanup(client, setup, info)
        if setup and setup.registry:
            setup.registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    records_at_end = _cache_records(client) if records_at_start is not None else None
    # its build context's record stays, as the folder does: the next run sends only what changed
    made = {r for r, kind in (records_at_end or {}).items() if r not in (records_at_start or {}) and kind != "source.local"}
    while made and not args.keep:  # a layer's record goes once no later one builds on it: rounds, while some go
        _prune_cache_records(client, made)
        records_at_end = _cache_records(client)
        left = set(records_at_end or ()) & made
        if records_at_end is None or len(left) == len(made):
            break
        made = left
    info["build_cache_left"] = None if records_at_end is None else _cache_bytes(client, made)

    doc = {
        "benchmark": "envbuild", "quick": args.quick, "started": started, "backend": "cpu",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_at_start": load_at_start,
                    "load": os.getloadavg(),
                    "other_containers_at_start": busy},
        "base": setup.base if setup else None, **info,
        "rows": [r.to_json() for r in rows],
    }
    print(table(rows))
    print(f"- machine: {os.cpu_count()} cores, load average {load_at_start[0]:.1f} at the start, {os.getloadavg()[0]:.1f} at the end")
    if busy:
        print(f"- note: {len(busy)} other container(s) ran during the benchmark; timings are noisier")
    if info.get("build_cache_left"):
        print(f"- note: {info['build_cache_left'] / 1e9:.1f} GB of this run's build cache is left "
              f"({'--keep' if args.keep else 'still in use'}; `docker builder prune` frees it)")
    if args.json_path:
        args.json_path.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

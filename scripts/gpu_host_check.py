#!/usr/bin/env python3
"""The GPU host check: what envbuild sees on a machine with an accelerator and no network, in one report.

Run it from the checkout on the GPU host (CONTRIBUTING.md, "The GPU host check"):

    scripts/gpu-host-wheels            # first, where PyPI answers: .gpu-wheels/, carried along with the tree
    python3 scripts/gpu_host_check.py  # then, on the GPU host: installs from the tree and .gpu-wheels/, no index

It installs envbuild from this working tree and the wheel folder into a folder of its own (no index asked), then
runs `envbuild detect`, `doctor` and `pick` (each with --json) against the real host, and the probe natively when
torch is importable there, and writes gpu-host-report.json and gpu-host-summary.txt (docs/reference/gpu-host-report.md
is the format). Nothing leaves the host: every proxy variable points at a closed loopback port and pip takes no
index. On a host without a GPU it says so in the same report. Standard library only, any Python from 3.10: the
host's Python is not known in advance. Exit 0 when every step ran (GPU or not), 1 when a step could not run, 2 on
bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

FORMAT = 1
ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 270.0  # seconds for the whole check: under the five minutes a lent GPU machine gives
NOWHERE = "http://127.0.0.1:9"  # the discard port on loopback: a request through it fails at once, on this host
NETWORK_CHECKS = ("base registry", "package index", "registry")  # doctor's checks that need the network
TAIL = 2000  # characters of a step's stderr kept in the report


class Steps:
    """Runs each step with its own timeout inside the check's one deadline, and keeps what it did."""

    def __init__(self, env: dict[str, str], cwd: Path, deadline: float):
        self.env, self.cwd, self.end = env, cwd, time.monotonic() + deadline
        self.done: list[dict] = []

    def run(self, name: str, argv: list[str], timeout: float) -> dict:
        left = self.end - time.monotonic()
        step = {"name": name, "argv": argv, "rc": None, "seconds": 0.0, "timed_out": False, "stdout": "", "stderr": ""}
        if left < 5:
            step["stderr"] = "not run: the check's deadline was reached"
            self.done.append(step)
            return step
        print(f"gpu-host-check: {name} ...", file=sys.stderr, flush=True)
        start = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.cwd,
                                  timeout=min(timeout, left), stdin=subprocess.DEVNULL)
            step.update(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr[-TAIL:])
        except subprocess.TimeoutExpired as exc:
            step.update(timed_out=True, stderr=f"timed out after {exc.timeout:.0f} s")
        except OSError as exc:
            step.update(stderr=f"could not start: {exc}")
        step["seconds"] = round(time.monotonic() - start, 2)
        self.done.append(step)
        return step


def _json(step: dict) -> dict | None:
    try:
        doc = json.loads(step["stdout"])
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def offline_env(site: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[name] = NOWHERE
    env.update(NO_PROXY="", no_proxy="", PIP_NO_INDEX="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONUNBUFFERED="1", NO_COLOR="1")
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


def pip_command(wheels: Path) -> list[str] | None:
    """This Python's pip, else pip run from its wheel in the folder (a host Python without pip or venv)."""
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        return [sys.executable, "-m", "pip"]
    found = sorted(wheels.glob("pip-*.whl"))
    return [sys.executable, str(found[-1] / "pip")] if found else None


def nvidia_smi(steps: Steps) -> list[dict] | None:
    """The GPUs as the driver's own tool lists them; None where there is no nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    fields = ("index", "name", "driver_version", "compute_cap", "memory.total")
    step = steps.run("nvidia-smi", ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader"], 30)
    if step["rc"] != 0:
        return []
    rows = [[c.strip() for c in line.split(",")] for line in step["stdout"].splitlines() if line.strip()]
    return [dict(zip(("index", "name", "driver", "compute_cap", "memory"), r)) for r in rows]


def check(args: argparse.Namespace) -> dict:
    started = datetime.now(timezone.utc)
    out: Path = args.out
    site = None if args.no_install else out / "site"
    steps = Steps(offline_env(site), out, args.deadline)
    report: dict = {"format": FORMAT, "check": "gpu-host", "started": started.isoformat(timespec="seconds"),
                    "network": f"not used: every proxy variable points at {NOWHERE} and pip takes no index",
                    "host": {"os": platform.platform(), "machine": platform.machine(),
                             "python": platform.python_version(), "executable": sys.executable}}
    report["host"]["nvidia_smi"] = nvidia_smi(steps)

    if site is not None:
        pip = pip_command(args.wheels)
        if not args.wheels.is_dir() or pip is None:
            report["error"] = (f"no wheel folder at {args.wheels} (or no pip in it): make it where PyPI answers with "
                               "scripts/gpu-host-wheels, carry it along, or pass --no-install where envbuild is installed")
        else:
            shutil.rmtree(site, ignore_errors=True)
            step = steps.run("install", [*pip, "install", "-q", "--disable-pip-version-check", "--no-index",
                                         "--find-links", str(args.wheels), "--target", str(site), "--no-compile",
                                         str(ROOT)], 180)
            if step["rc"] != 0:
                report["error"] = (f"envbuild did not install from {args.wheels} for Python "
                                   f"{platform.python_version()}: rerun scripts/gpu-host-wheels with "
                                   f"PYTHONS={platform.python_version_tuple()[0]}.{platform.python_version_tuple()[1]}")
    if "error" not in report:
        envbuild = [sys.executable, "-m", "envbuild"]
        matrix = ["--matrix", str(ROOT / "matrix.yaml")]
        detect = _json(steps.run("detect", [*envbuild, "detect", "--json", *matrix], 60))
        pick_step = steps.run("pick", [*envbuild, "pick", "--json", *matrix], 60)
        pick = _json(pick_step)
        backend = args.backend or (pick or {}).get("family") or (pick or {}).get("backend") or "cpu"
        doctor = _json(steps.run("doctor", [*envbuild, "doctor", "--backend", backend, "--json", *matrix], 90))
        show = _json(steps.run("show", [*envbuild, "show", backend, "--json", *matrix], 60)) or {}
        report["detect"] = detect
        report["pick"] = pick
        report["doctor"] = doctor
        report["gpu"] = gpu_summary(detect, pick, report["host"]["nvidia_smi"])
        report["probe"] = probe(steps, out, backend, show, args.compile)
    report["steps"] = [{k: v for k, v in s.items() if k != "stdout"} for s in steps.done]
    report["seconds"] = round((datetime.now(timezone.utc) - started).total_seconds(), 1)
    report["ok"] = "error" not in report and all(s["rc"] is not None for s in steps.done)
    return report


def gpu_summary(detect: dict | None, pick: dict | None, smi: list[dict] | None) -> dict:
    accelerators = [b for b in (detect or {}).get("detected", []) if b != "cpu"]
    gpus = (pick or {}).get("gpus") or []
    found = bool(accelerators or smi)
    return {"found": found, "backends": accelerators, "gpus": gpus, "nvidia_smi": smi,
            "host": (pick or {}).get("host"),
            "says": (f"accelerator found: {', '.join(accelerators) or 'a GPU nvidia-smi lists'}" if found else
                     "no GPU on this host: detect found no accelerator, so every check ran against the CPU")}


def probe(steps: Steps, out: Path, backend: str, show: dict, compile_: bool) -> dict:
    """The probe, natively, on the backend's device, when this Python has torch and transformers."""
    have = steps.run("import torch", [sys.executable, "-c", "import torch, transformers; print(torch.__version__)"], 90)
    if have["rc"] != 0:
        return {"ran": False, "why_not": "torch and transformers are not importable by this Python "
                                         f"({sys.executable}): the probe needs both", "report": None}
    argv = [sys.executable, str(ROOT / "envbuild" / "smoke" / "probe.py"), "--backend", backend,
            "--device", show.get("device") or "cpu", "--model", "synthetic",
            "--compile" if compile_ else "--no-compile", "--output", str(out / "probe.json")]
    if show.get("import"):
        argv += ["--plugin-import", show["import"]]
    if show.get("availability"):
        argv += ["--availability", show["availability"]]
    step = steps.run("probe", argv, 200)
    doc = _json(step)
    return {"ran": doc is not None, "why_not": None if doc else f"the probe gave no report (exit {step['rc']})",
            "ok": bool(doc and doc.get("ok")), "report": doc}


def summary(report: dict) -> str:
    lines = [f"envbuild GPU host check ({report['started']}, {report['seconds']} s)",
             f"host:    {report['host']['os']}, Python {report['host']['python']}"]
    if "error" in report:
        return "\n".join([*lines, f"error:   {report['error']}"])
    gpu = report["gpu"]
    lines.append(f"gpu:     {gpu['says']}")
    for row in gpu["nvidia_smi"] or []:
        lines.append(f"         GPU {row.get('index')}: {row.get('name')}, driver {row.get('driver')}, "
                     f"compute {row.get('compute_cap')}, {row.get('memory')}")
    pick = report.get("pick") or {}
    if pick:
        lines.append(f"pick:    {pick.get('image') or 'no image fits'} ({pick.get('why') or pick.get('refusal')})")
        lines += [f"         warning: {w}" for w in pick.get("warnings") or []]
    doctor = report.get("doctor") or {}
    if doctor:
        failed = [c["name"] for c in doctor.get("checks", []) if c.get("status") == "FAIL"]
        offline = [n for n in failed if n in NETWORK_CHECKS]
        lines.append(f"doctor:  {doctor.get('backend')}: can build {doctor.get('can_build')}, can run "
                     f"{doctor.get('can_run')}" + (f"; failed: {', '.join(failed)}" if failed else ""))
        if offline:
            lines.append("         (the registry and index checks fail by design: this check keeps off the network)")
    p = report["probe"]
    if p["ran"]:
        doc = p["report"]
        name = (doc.get("device_info") or {}).get("name") or doc.get("device")
        bad = [c["name"] for c in doc.get("checks", []) if not c.get("ok")]
        lines.append(f"probe:   {'passed' if p['ok'] else 'FAILED'} on {name} (torch {doc['versions'].get('torch')})"
                     + (f"; failed: {', '.join(bad)}" if bad else ""))
    else:
        lines.append(f"probe:   not run: {p['why_not']}")
    slow = [f"{s['name']} {'timed out' if s['timed_out'] else 'did not run'}" for s in report["steps"] if s["rc"] is None]
    if slow:
        lines.append(f"steps:   {'; '.join(slow)}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_host_check.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--wheels", type=Path, default=ROOT / ".gpu-wheels",
                   help="the wheel folder scripts/gpu-host-wheels made (default: .gpu-wheels in the checkout)")
    p.add_argument("--no-install", action="store_true",
                   help="use the envbuild this Python already imports instead of installing from the tree")
    p.add_argument("--out", type=Path, default=Path("gpu-host-check"), help="where the report goes")
    p.add_argument("--backend", help="the backend to check (default: the one pick chooses here)")
    p.add_argument("--compile", action="store_true", help="also run the probe's torch.compile check")
    p.add_argument("--deadline", type=float, default=DEADLINE, help="seconds for the whole check")
    args = p.parse_args(argv)
    args.out = args.out.resolve()
    args.wheels = args.wheels.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    report = check(args)
    text = summary(report)
    (args.out / "gpu-host-report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (args.out / "gpu-host-summary.txt").write_text(text + "\n", encoding="utf-8")
    print(text)
    print(f"report: {args.out / 'gpu-host-report.json'}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""envbuild's resolver: what would installing these requirements add to this environment?

`envbuild lock` runs it inside the backend's own base, with that environment's Python, so the packages the
base already carries (a vendor's torch, its plugin) and its Python decide the answer; with --keep-base every
one of them is a constraint, so nothing of a vendor's environment is ever replaced. pip answers (`install --dry-run --report`). The versions
of the lock being refreshed are kept where they still fit (`--previous`), except those named to upgrade.

pip's own output (what it collects, from which index, its retries and warnings) passes through as it comes: the
builder shows it as progress and the lock's log keeps it. Standard library and pip only. Writes into --out: report.json (pip's report) and status.json, or error.txt
with pip's own words when no resolution exists. Exit status 0 either way: the caller reads what was written.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: str) -> dict[str, str]:
    """name -> version of the NAME==VERSION lines of a requirements file (a previous lock)."""
    found = {}
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line.strip())
                if m:
                    found[canonical(m.group(1))] = m.group(2)
    except FileNotFoundError:
        pass
    return found


def names(path: str) -> set[str]:
    try:
        with open(path, encoding="utf-8") as fh:
            return {canonical(re.split(r"[\s\[<>=!~;@]", line.strip(), maxsplit=1)[0]) for line in fh if line.strip()}
    except FileNotFoundError:
        return set()


def write(path: str, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("".join(line + "\n" for line in lines))


def streamed(argv: list[str]) -> tuple[int, list[str]]:
    """Run pip with its output passed on line by line as it comes (stdout and stderr as one stream): the builder
    shows it as progress and keeps it in the lock's log. Its exit status and every line it said."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    said = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        said.append(line.rstrip("\n"))
    return proc.wait(), said


def main() -> int:
    p = argparse.ArgumentParser(prog="resolve.py")
    p.add_argument("--requirements", required=True)
    p.add_argument("--previous", help="the lock being refreshed: its versions stay where they still fit")
    p.add_argument("--upgrade", help="a file of names whose previous versions are not kept ('*': none are)")
    p.add_argument("--out", required=True)
    p.add_argument("--keep-base", action="store_true", help="every installed distribution is a constraint")
    p.add_argument("pip_args", nargs=argparse.REMAINDER, help="after --: index URLs and find-links for pip")
    a = p.parse_args()
    pip = [sys.executable, "-m", "pip"]
    os.makedirs(a.out, exist_ok=True)
    listed = subprocess.run([*pip, "list", "--format=json", "--disable-pip-version-check"], capture_output=True, text=True)
    if listed.returncode != 0:
        write(os.path.join(a.out, "error.txt"), [f"`pip list` failed in this environment: {listed.stderr.strip()[-2000:]}"])
        return 0
    base = {canonical(d["name"]): d["version"] for d in json.loads(listed.stdout)}
    write("/tmp/base.txt", [f"{n}=={v}" for n, v in sorted(base.items())] if a.keep_base else [])
    upgrade = names(a.upgrade) if a.upgrade else set()
    requested = names(a.requirements)
    kept = {} if "*" in upgrade else {n: v for n, v in pins(a.previous).items()
                                      if a.previous and n not in upgrade and n not in requested and n not in base}
    write("/tmp/previous.txt", [f"{n}=={v}" for n, v in sorted(kept.items())])
    version = subprocess.run([*pip, "--version"], capture_output=True, text=True).stdout.split()[1:2]
    extra = [a for a in a.pip_args if a != "--"]
    attempts = [["-c", "/tmp/previous.txt"], []] if kept else [[]]
    said: list[str] = []
    for constraints in attempts:
        if constraints:
            print("resolve.py: resolving with the previous lock's versions kept where they fit", flush=True)
        else:
            print("resolve.py: resolving" + (" afresh (the previous versions do not fit)" if kept else ""), flush=True)
        rc, said = streamed([*pip, "install", "--dry-run", "--disable-pip-version-check", "--no-input",
                             "--progress-bar", "off", "--report", os.path.join(a.out, "report.json"),
                             "-r", a.requirements, "-c", "/tmp/base.txt", *constraints, *extra])
        if rc == 0:
            with open(os.path.join(a.out, "status.json"), "w", encoding="utf-8") as fh:
                json.dump({"resolver": f"pip {version[0] if version else '?'}", "kept_previous": bool(constraints),
                           "base": base}, fh, sort_keys=True)
            return 0
    # pip's explanation of a conflict ("The conflict is caused by: ...") goes to stdout, its verdict to stderr
    said = [ln for ln in said if ln.strip()]
    start = next((i for i, ln in enumerate(said) if ln.startswith(("ERROR", "The conflict is caused by"))), max(len(said) - 40, 0))
    write(os.path.join(a.out, "error.txt"), said[start:][:60])
    return 0


if __name__ == "__main__":
    sys.exit(main())

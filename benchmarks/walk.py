"""The walk of a command: which folders of envbuild its execution passes through, in order, and how often it
comes back to each. A contributors' tool (not shipped): issue 50 asks that the walks of `envbuild build` and
`envbuild lock --platform` visit each folder at most twice.

    python benchmarks/walk.py [--json] [--calls] -- build --backend cpu [ARGS...]
    python benchmarks/walk.py -- lock --backend cpu --platform linux/amd64 [ARGS...]

It runs `envbuild.cli:main` in this process with those arguments (its exit caught; run it where the command
works: a real engine, the matrix and the inputs it needs) under `sys.setprofile` and `threading.setprofile`, and
keeps the tree of envbuild's Python frames by folder: a node is a stay, execution in one top-level folder of
envbuild/, and its children are the calls it made into other folders, in order. Frames outside envbuild (click,
docker, the standard library) are skipped, so cli -> click -> cli is one stay. Imports are not part of a walk: a
module's body and what it calls while it is imported are skipped. Files directly in envbuild/ count as cli/.

The walk is the tree read in order (a stay, then each call and the return to the caller), consecutive stays in one
folder merged. From it:
  visits      of a folder: its stays in the walk; max visits: the most of any folder; rooms: folders visited;
  entries     of a folder: the calls into it from another folder (a return to the caller is no new entry; the
              root, cli/, has none);
  climbs      moves in the walk to a folder of a higher layer (tests/unit/test_layers.py's order): a call down and
              its return counts once, on the way back up;
  round trips A -> B -> A in the walk, per pair of folders;
  calls up    calls into a folder of a higher layer than the caller's: callbacks (echo, on_line), the only way
              execution climbs other than by returning.
Three readings, each printed:
  all           every folder. core/'s leaf helpers (text, files, errors) are called from everywhere, so this is
                thousands of stays;
  without_core  core/ left out (the stays around a core call merge): every call between the stages;
  folded        also without core/, and a leaf excursion (a call into a folder that calls no third folder before
                it returns: a Matrix.pin, an Engine.ping, an echo) folded into the stay that made it: the path the
                work takes from folder to folder, which is how the issue reads "visits".
--calls prints each call into another folder (core/ left out) by its first function, indented by depth: where a
visit comes from.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import envbuild  # noqa: E402  (this checkout's envbuild, not an installed one)

PACKAGE = str(Path(envbuild.__file__).parent) + "/"
LAYERS = ["core", "net", "engine", "matrix", "render", "image", "smoke", "ship", "host", "workspace", "report",
          "maintain", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}


def _folder(filename: str) -> str | None:
    """The top-level envbuild folder of a source file, None outside the package."""
    if not filename.startswith(PACKAGE):
        return None
    parts = filename[len(PACKAGE):].split("/")
    return parts[0] if len(parts) > 1 else "cli"


class Node:
    """A stay in the call tree: execution in one folder, with the calls it made into other folders (in order)."""

    def __init__(self, folder: str, parent: Node | None = None, name: str = "") -> None:
        self.folder, self.parent, self.children, self.name = folder, parent, [], name  # name: its first function
        self.inside: set[str] = set()  # every folder below it (filled in by folders())


class Recorder:
    """The tree of stays of envbuild's frames, with module bodies (imports) and what they call left out."""

    def __init__(self) -> None:
        self.root = Node("cli")
        self.main = threading.get_ident()
        self.stacks: dict[int, list[Node]] = {}
        self.lock = threading.Lock()
        self.importing = threading.local()

    def __call__(self, frame, event: str, arg) -> None:
        if event not in ("call", "return"):
            return
        code = frame.f_code
        depth = getattr(self.importing, "depth", 0)
        if code.co_name == "<module>":
            self.importing.depth = depth + (1 if event == "call" else -1)
            return
        folder = _folder(code.co_filename)
        if depth or folder is None:
            return
        with self.lock:
            stack = self.stacks.setdefault(threading.get_ident(), [])
            if event == "return":
                if stack:
                    stack.pop()
                return
            # a worker thread's first frame hangs below where the main thread is
            top = stack[-1] if stack else (self.stacks.get(self.main) or [self.root])[-1]
            if top.folder != folder:
                top.children.append(Node(folder, top, f"{code.co_filename[len(PACKAGE):]}:{code.co_qualname}"))
                top = top.children[-1]
            stack.append(top)


def folders(node: Node) -> set[str]:
    node.inside = {node.folder}.union(*(folders(c) for c in node.children)) if node.children else {node.folder}
    return node.inside


def stays(node: Node, leave_out: frozenset[str] = frozenset(), fold: bool = False) -> tuple[list[str], Counter]:
    """The walk below `node` as stays (consecutive same-folder stays merged). leave_out: folders whose stays are
    skipped (their calls still walked); fold: a leaf excursion (a call into a folder that calls no third folder
    outside leave_out before it returns) is folded into the stay that made it. Also the entries: calls into
    each folder from another (a return to the caller is no new entry)."""
    out: list[str] = []
    entered: Counter = Counter()

    def add(folder: str) -> None:
        if folder not in leave_out and (not out or out[-1] != folder):
            out.append(folder)

    def walk(n: Node) -> None:
        add(n.folder)
        for child in n.children:
            if fold and child.inside - leave_out <= {child.folder}:
                continue
            if child.folder not in leave_out and child.folder != (out[-1] if out else None):
                entered[child.folder] += 1
            walk(child)
            add(n.folder)

    walk(node)
    return out, entered


def entries(node: Node, leave_out: frozenset[str], depth: int = 0) -> list[str]:
    """Each call into another folder (core/ left out), indented by depth: where a visit comes from."""
    lines = []
    for child in node.children:
        if child.folder not in leave_out:
            lines.append(f"{'  ' * depth}{child.name}")
        lines += entries(child, leave_out, depth + (child.folder not in leave_out))
    return lines


def calls_up(node: Node, leave_out: frozenset[str], above: str = "cli") -> Counter:
    """Calls into a folder of a higher layer than the caller's (callbacks: echo, on_line), per caller -> callee."""
    found: Counter = Counter()
    for child in node.children:
        caller = above if node.folder in leave_out else node.folder
        if child.folder not in leave_out and RANK[child.folder] > RANK[caller]:
            found[f"{caller}->{child.folder}"] += 1
        found += calls_up(child, leave_out, caller)
    return found


def summary(found: tuple[list[str], Counter]) -> dict:
    walk, entered = found
    visits = Counter(walk)
    trips = Counter(tuple(sorted((a, b))) for a, b, c in zip(walk, walk[1:], walk[2:]) if a == c)
    return {
        "sequence": walk,
        "stays": len(walk),
        "rooms": len(visits),
        "visits": dict(sorted(visits.items(), key=lambda kv: RANK.get(kv[0], 99))),
        "max_visits": max(visits.values(), default=0),
        "entries": dict(sorted(entered.items(), key=lambda kv: RANK.get(kv[0], 99))),
        "max_entries": max(entered.values(), default=0),
        "climbs": sum(RANK[b] > RANK[a] for a, b in zip(walk, walk[1:])),
        "round_trips": {f"{a}<->{b}": n for (a, b), n in trips.most_common()},
    }


def run(argv: list[str]) -> tuple[Node, int]:
    from envbuild.cli import main

    recorder = Recorder()
    saved, sys.argv = sys.argv, ["envbuild", *argv]
    code = 0
    threading.setprofile(recorder)
    sys.setprofile(recorder)
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        sys.argv = saved
    folders(recorder.root)
    return recorder.root, code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the summaries as JSON")
    parser.add_argument("--calls", action="store_true", help="also print each call into another folder (no core)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the envbuild command line (after --)")
    ns = parser.parse_args()
    argv = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    sys.setrecursionlimit(100_000)
    root, code = run(argv)
    no_core = frozenset({"core"})
    result = {"command": argv, "exit": code, "all": summary(stays(root)),
              "without_core": summary(stays(root, no_core)),
              "folded": summary(stays(root, no_core, fold=True)),
              "calls_up": dict(calls_up(root, no_core).most_common())}
    if ns.calls:
        print("\n".join(entries(root, no_core)), file=sys.stderr)
    if ns.json:
        print(json.dumps(result, indent=1), file=sys.stderr)
        return
    print(f"\nwalk of envbuild {' '.join(argv)} (exit {code})", file=sys.stderr)
    for name in ("all", "without_core", "folded"):
        s = result[name]
        print(f"\n{name}: {s['stays']} stays in {s['rooms']} rooms, {s['climbs']} climbs, max visits "
              f"{s['max_visits']}, max entries {s['max_entries']}", file=sys.stderr)
        if s["stays"] <= 300:  # with core/, a walk is thousands of stays: its counts say enough
            print("  " + " > ".join(s["sequence"]), file=sys.stderr)
        print("  visits: " + ", ".join(f"{k} {v}" for k, v in s["visits"].items()), file=sys.stderr)
        print("  entries: " + ", ".join(f"{k} {v}" for k, v in s["entries"].items()), file=sys.stderr)
        if s["round_trips"]:
            print("  round trips: " + ", ".join(f"{k} {v}" for k, v in s["round_trips"].items()), file=sys.stderr)
    print("\ncalls up (callbacks, core/ left out): "
          + (", ".join(f"{k} {v}" for k, v in result["calls_up"].items()) or "none"), file=sys.stderr)


if __name__ == "__main__":
    main()

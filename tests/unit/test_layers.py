"""Stages without cycles: data flows matrix -> render -> lock -> build -> smoke -> registry; host and sources stand
beside (they may use the stages, the stages never import them); the CLI and the output modules sit on top.

Every import of every envbuild module is read (ast: top level and inside functions; `if TYPE_CHECKING:` imports
are annotations only and are skipped) and each edge is held to the layers below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import envbuild

ROOT = Path(envbuild.__file__).parent

# The layer of each unit; a unit may import units of lower layers only (and itself).
LAYERS: dict[str, float] = {
    # neutral: shared types and the one door to Docker, imported by any stage
    "envbuild": 0, "errors": 0, "text": 0, "files": 0, "paths": 0, "imageref": 0, "owner": 0, "engine": 0,
    "checks": 0, "credential_env": 0, "cachemount": 0,
    # the one client of registries' HTTP API and its credentials (publish, pull, signing and the lock's base digest)
    "regclient": 0.5,
    "output": 0.7,  # the one output layer: every stage prints through it; it masks registry credentials
    "matrix": 1,
    # what is true of this host (its driver and platform, image-vs-host compatibility, against the matrix's stack
    # facts): read by the stages after render
    "hostfacts": 1.5,
    "render": 2,
    "lock": 3,
    "build": 4,
    "sbom": 4.5,
    "smoke": 5,
    "registry": 6,
    # beside the stages
    "host": 7, "sources": 8.5,
    # on top: output, commands
    "report": 8, "run": 8, "clean": 8, "ci": 8, "site": 8.5,
    "cli": 9,
}
HOSTFACTS = {"envbuild.host.platform", "envbuild.host.drivers", "envbuild.host.compat"}
REGCLIENT = {"envbuild.registry.api", "envbuild.registry.credentials"}
NEUTRAL = {u for u, layer in LAYERS.items() if layer == 0}
# No exception: resolving a lock runs the builder, so it lives in build (envbuild.build.locking), and lock is the
# format and its inputs. A pair (importer, imported) here would be allowed against the layers, never in a cycle.
ALLOWED: set[tuple[str, str]] = set()


def unit(module: str) -> str:
    if module in HOSTFACTS:
        return "hostfacts"
    if module in REGCLIENT:
        return "regclient"
    if module.startswith("envbuild.trust"):  # signing is part of the registry stage: publish signs, pull verifies
        return "registry"
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "envbuild"


def _module_name(path: Path) -> str:
    parts = ["envbuild", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:`."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def imports() -> dict[str, set[str]]:
    """module -> the envbuild modules it imports, anywhere in it."""
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_only(tree)
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.split(".")[0] == "envbuild"}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if target.split(".")[0] != "envbuild":
                    continue
                for a in node.names:  # `from . import owner` imports the module envbuild.owner
                    found.add(f"{target}.{a.name}" if f"{target}.{a.name}" in modules else target)
        edges[name] = {m for m in found if m in modules and m != name}
    return edges


def problems(edges: dict[str, set[str]]) -> list[str]:
    """Imports against the layers, and cycles between units."""
    found = []
    graph: dict[str, set[str]] = {}
    for a, targets in edges.items():
        for b in targets:
            ua, ub = unit(a), unit(b)
            if ua == ub:
                continue
            assert ua in LAYERS and ub in LAYERS, f"{a} or {b}: give its unit a layer in LAYERS"
            graph.setdefault(ua, set()).add(ub)
            if (ua, ub) in ALLOWED or (ua in NEUTRAL and ub in NEUTRAL):
                continue
            if LAYERS[ua] <= LAYERS[ub]:
                found.append(f"{a} imports {b}: {ua} (layer {LAYERS[ua]}) may not import {ub} (layer {LAYERS[ub]})")
    # cycles between units, through any imports (the allowed exception included: it must not close a cycle either
    # beyond the one it names)
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start and len(path) > 1 and not _only_allowed(path + [nxt]):
                    found.append("import cycle: " + " -> ".join(path + [nxt]))
                elif nxt not in seen and nxt != start:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return sorted(set(found))


def _only_allowed(cycle: list[str]) -> bool:
    """The one named exception's cycle (lock -> build -> lock), and nothing more."""
    pairs = set(zip(cycle, cycle[1:]))
    return any(p in ALLOWED for p in pairs) and len(set(cycle)) == 2


def test_stages_import_only_layers_below_and_form_no_cycle():
    assert problems(imports()) == []


def test_every_unit_has_a_layer():
    assert {unit(m) for m in imports()} <= set(LAYERS)


def test_the_check_finds_a_new_cycle_and_a_wrong_direction():
    edges = imports()
    assert "envbuild.imageref" in edges["envbuild.engine"]  # the reader sees module-level imports ...
    assert "envbuild.owner" in edges["envbuild.smoke.runner"]  # ... and `from .. import owner`
    assert "envbuild.host.platform" in edges["envbuild.lock"]  # ... and imports inside functions
    assert "envbuild.matrix" not in edges["envbuild.engine"]  # ... but not `if TYPE_CHECKING:` ones
    wrong = {**edges, "envbuild.render": edges["envbuild.render"] | {"envbuild.registry.publish"}}
    assert any("render" in p and "registry" in p for p in problems(wrong))
    cycle = {**edges, "envbuild.smoke.runner": edges["envbuild.smoke.runner"] | {"envbuild.host.doctor"}}
    assert any(p.startswith("import cycle") and "smoke" in p and "host" in p for p in problems(cycle))
    compat = {**edges, "envbuild.host.compat": edges["envbuild.host.compat"] | {"envbuild.smoke.preflight"}}
    assert problems(compat)
    assert "envbuild.lock" in edges["envbuild.build.locking"]  # the build resolves locks ...
    back = {**edges, "envbuild.lock": edges["envbuild.lock"] | {"envbuild.build.builder"}}  # ... never the reverse
    assert any("lock (layer 3) may not import build" in p for p in problems(back))
    assert any(p.startswith("import cycle") and "lock" in p and "build" in p for p in problems(back))


# --- one door to Docker ------------------------------------------------------------------------------------------

# Who may start processes, and why: none of them a docker client (the engine starts those).
PROCESSES = {
    "envbuild.engine": "the docker client: builds, `envbuild run`, its version",
    "envbuild.host.engine_setup": "installing and starting a daemon: apt-get, systemctl, dockerd",
    "envbuild.host.drivers": "the vendors' tools (nvidia-smi, ...) where no file says the driver version",
    "envbuild.host.venv": "python -m venv and pip for `envbuild env`",
    "envbuild.registry.manifest": "git, for the revision the manifest records",
    "envbuild.lock.resolve": "pip inside the image being locked (runs there, not here)",
}


def _top_level_imports(name: str) -> set[str]:
    path = ROOT.joinpath(*name.split(".")[1:]).with_suffix(".py")
    if not path.exists():
        path = ROOT.joinpath(*name.split(".")[1:], "__init__.py")
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_engine_talks_to_docker():
    modules = imports()
    assert [m for m in modules if "docker" in _top_level_imports(m)] == ["envbuild.engine"]
    starters = sorted(m for m in modules if "subprocess" in _top_level_imports(m))
    assert starters == sorted(PROCESSES), "a new module starts processes: a docker client goes through envbuild.engine"


def _docker_client_named(source: str) -> list[str]:
    """Where source names the docker client to start: an argv whose first word is `docker`, or a PATH search for it."""
    found = []
    for node in ast.walk(ast.parse(source)):
        first = node.elts[0] if isinstance(node, (ast.List, ast.Tuple)) and node.elts else None
        if isinstance(first, ast.Constant) and first.value == "docker":
            found.append(ast.unparse(node))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("which") and node.args \
                and isinstance(node.args[0], ast.Constant) and node.args[0].value == "docker":
            found.append(ast.unparse(node))
    return found


def test_no_module_that_starts_processes_starts_a_docker_client_but_the_engine():
    assert _docker_client_named('subprocess.run(["docker", "push", ref])') and _docker_client_named("shutil.which('docker')")
    assert not _docker_client_named('subprocess.run(["systemctl", "start", "docker"])')  # the daemon's service: setup
    for name in sorted(PROCESSES):
        path = ROOT.joinpath(*name.split(".")[1:]).with_suffix(".py")
        path = path if path.exists() else ROOT.joinpath(*name.split(".")[1:], "__init__.py")
        named = _docker_client_named(path.read_text(encoding="utf-8"))
        assert bool(named) == (name == "envbuild.engine"), (name, named)


def test_setting_up_a_daemon_is_the_cli_s_alone():
    """host.engine_setup administers the system (apt-get, systemctl, dockerd): no stage, and nothing of the library
    but the command line, reaches it."""
    assert [m for m, targets in imports().items() if "envbuild.host.engine_setup" in targets] == ["envbuild.cli"]

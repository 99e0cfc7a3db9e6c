"""The folders are the layers: each top-level folder of envbuild is one, in the order data flows, and a folder
imports only the folders below it. No table re-cuts the tree: the unit of a module is its top-level folder.

    core (shared pieces) < net < engine < matrix < render < image < smoke < ship   (the stages)
        < host < workspace < report < maintain   (beside the stages, using them)   < cli

Every import of every envbuild module is read (ast: at top level, inside functions and under `if TYPE_CHECKING:`,
which is a dependency all the same) and each edge between folders is held to the order; nothing closes a cycle.
The image pipeline (lock, then build) is one folder: `envbuild build` and `envbuild lock` stay inside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import envbuild

ROOT = Path(envbuild.__file__).parent

# The layer of each top-level folder; a folder may import folders of lower layers only (and itself).
LAYERS: dict[str, int] = {
    "core": 0,  # errors, files, output, imageref, platform, hostfacts, settings
    "net": 1,  # the registry client, every network answer, proxies, credentials, the reachability probe
    "engine": 2,  # the one door to an engine: Docker, Podman, which one, how each runs and builds
    "matrix": 3, "render": 4, "image": 5, "smoke": 6, "ship": 7,  # the stages; image = lock then build
    # beside the stages, using them, each named for what it serves:
    "host": 8,  # questions about a host, this one or one described: detect, doctor, pick, launch, engine_setup
    "workspace": 9,  # what envbuild keeps on the user's machine: run, venv (`env`), base, clean
    "report": 10,  # what commands print at length: report, site
    "maintain": 11,  # keeping the matrix current: sources (outdated, bump), ci, docgen
    "cli": 12,
    "envbuild": 13, "__main__": 13,  # the package itself and `python -m envbuild`
}
BUILD_OUTPUT_NAMES = {"build", "dist", "out", "target"}  # ignore templates and tools take these for build output


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "envbuild"


def _module_name(path: Path) -> str:
    parts = ["envbuild", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _import_targets(name: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, list[str]]]:
    """(imported module, the names taken from it) for every envbuild import in the module, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "envbuild"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "envbuild":
                continue
            for a in node.names:  # `from envbuild.core import owner` imports the module envbuild.engine.owner
                sub = f"{target}.{a.name}"
                found.append((sub, []) if sub in modules else (target, [a.name]))
    return found


def imports() -> dict[str, set[str]]:
    """module -> the envbuild modules it imports, anywhere in it."""
    modules = _modules()
    return {name: {m for m, _ in _import_targets(name, path, modules) if m in modules and m != name}
            for name, path in modules.items()}


def problems(edges: dict[str, set[str]]) -> list[str]:
    """Imports against the layers, and cycles between folders."""
    found = []
    graph: dict[str, set[str]] = {}
    for a, targets in edges.items():
        for b in targets:
            ua, ub = unit(a), unit(b)
            if ua == ub:
                continue
            assert ua in LAYERS and ub in LAYERS, f"{a} or {b}: give its folder a layer in LAYERS"
            graph.setdefault(ua, set()).add(ub)
            if LAYERS[ua] <= LAYERS[ub]:
                found.append(f"{a} imports {b}: {ua} (layer {LAYERS[ua]}) may not import {ub} (layer {LAYERS[ub]})")
    for start in graph:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start and len(path) > 1:
                    found.append("import cycle: " + " -> ".join(path + [nxt]))
                elif nxt not in seen and nxt != start:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return sorted(set(found))


def test_stages_import_only_layers_below_and_form_no_cycle():
    assert problems(imports()) == []


def test_every_folder_has_a_layer_and_the_tree_shows_it():
    assert {unit(m) for m in imports()} <= set(LAYERS)
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(LAYERS) - {"envbuild", "__main__"}, "a top-level folder is a layer, and each layer a folder"
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert loose == ["__init__.py", "__main__.py"], "a module at the top belongs in the folder of its layer"


def test_no_package_folder_is_named_as_build_output():
    named = [p for p in ROOT.rglob("*") if p.is_dir() and p.name in BUILD_OUTPUT_NAMES]
    assert named == []


def test_no_module_imports_another_modules_private_names():
    modules = _modules()
    private = []
    for name, path in modules.items():
        for target, names in _import_targets(name, path, modules):
            private += [f"{name} imports {target}.{n}" for n in names if n.startswith("_") and target != name]
        source = path.read_text(encoding="utf-8")
        aliases = {a.asname or a.name.rsplit(".", 1)[-1]: f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom)
                   else a.name for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Import, ast.ImportFrom))
                   for a in node.names}
        for node in ast.walk(ast.parse(source)):  # module._name, where module is an envbuild module
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.attr.startswith("_") \
                    and not node.attr.startswith("__") and aliases.get(node.value.id, "") in modules:
                private.append(f"{name} reads {aliases[node.value.id]}.{node.attr}")
    assert private == []


def test_the_check_finds_a_new_cycle_and_a_wrong_direction():
    edges = imports()
    assert "envbuild.core.imageref" in edges["envbuild.engine.docker"]  # the reader sees module-level imports ...
    assert "envbuild.engine.owner" in edges["envbuild.smoke.runner"]  # ... and `from envbuild.core import owner`
    assert "envbuild.core.platform" in edges["envbuild.image.lockstate"]  # ... and imports inside functions
    wrong = {**edges, "envbuild.render": edges["envbuild.render"] | {"envbuild.ship.publish"}}
    assert any("render" in p and "ship" in p for p in problems(wrong))
    cycle = {**edges, "envbuild.smoke.runner": edges["envbuild.smoke.runner"] | {"envbuild.host.doctor"}}
    assert any(p.startswith("import cycle") and "smoke" in p and "host" in p for p in problems(cycle))
    compat = {**edges, "envbuild.matrix.compat": edges["envbuild.matrix.compat"] | {"envbuild.smoke.preflight"}}
    assert problems(compat)
    assert "envbuild.image.builder" in edges["envbuild.image.locking"]  # the lock resolves with the builder ...
    assert "envbuild.image.locking" in edges["envbuild.image.build"]  # ... and a build ensures it: one folder
    up = {**edges, "envbuild.image.plan": edges["envbuild.image.plan"] | {"envbuild.smoke.runner"}}
    assert any("image (layer 5) may not import smoke" in p for p in problems(up))
    down = {**edges, "envbuild.net.regclient": edges["envbuild.net.regclient"] | {"envbuild.engine.docker"}}
    assert any("net (layer 1) may not import engine" in p for p in problems(down))


# --- one door to Docker ------------------------------------------------------------------------------------------

# Who may start processes, and why: none of them a docker client (the engine starts those).
PROCESSES = {
    "envbuild.engine.docker": "the docker client: builds, `envbuild run`, its version",
    "envbuild.engine.podman": "the podman command: every question to Podman, its containers, pushes and pulls",
    "envbuild.host.engine_setup": "installing and starting a daemon: apt-get, systemctl, dockerd",
    "envbuild.core.hostfacts": "the vendors' tools (nvidia-smi, ...) where no file says the driver version",
    "envbuild.workspace.venv": "python -m venv and pip for `envbuild env`",
    "envbuild.workspace.base": "mmdebstrap, making a base image from a distribution's archive",
    "envbuild.ship.manifest": "git, for the revision the manifest records",
    "envbuild.image.resolve": "pip inside the image being locked (runs there, not here)",
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
    assert [m for m in modules if "docker" in _top_level_imports(m)] == ["envbuild.engine.docker"]
    starters = sorted(m for m in modules if "subprocess" in _top_level_imports(m))
    assert starters == sorted(PROCESSES), "a new module starts processes: a docker client goes through envbuild.engine.docker"


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
        assert bool(named) == (name == "envbuild.engine.docker"), (name, named)


def test_setting_up_a_daemon_is_the_cli_s_alone():
    """host.engine_setup administers the system (apt-get, systemctl, dockerd): no stage, and nothing of the library
    but the command line, reaches it."""
    assert [m for m, targets in imports().items() if "envbuild.host.engine_setup" in targets] == ["envbuild.cli.options"]

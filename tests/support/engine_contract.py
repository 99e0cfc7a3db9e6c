"""The engine contract's conformance check: every engine a stage may be handed declares EngineAPI and defines each
of its methods with the protocol's parameters exactly (names, kinds, defaults, annotations). A new engine joins
IMPLEMENTATIONS (CONTRIBUTING.md, "Recipe: add an engine"); tests/unit/test_engine.py checks each one."""

from __future__ import annotations

import ast
import inspect
import textwrap

from support.fakes import FakeEngine

from envbuild.engine import docker as engine
from envbuild.engine.podman import Podman

IMPLEMENTATIONS: tuple[type, ...] = (engine.Engine, Podman, FakeEngine)

# Public methods beyond the contract: an engine's own only connect; the fake's only set the scene.
EXTRAS = {FakeEngine: {"add_image"}}
ENGINE_EXTRAS = {"connect"}


def contract() -> dict[str, object]:
    """The methods a stage may call, by name."""
    return {name: fn for name, fn in vars(engine.EngineAPI).items() if callable(fn) and not name.startswith("_")}


def attributes() -> set[str]:
    """What a stage may read of an engine besides its methods: host, kind, check_name, purposes."""
    return set(getattr(engine.EngineAPI, "__annotations__", {}))


def attribute_problem(cls: type, name: str) -> str | None:
    """Why cls does not give the contract's attribute `name` (on the class, or set by __init__), or None."""
    if any(name in vars(c) for c in cls.__mro__ if c is not engine.EngineAPI):
        return None
    init = textwrap.dedent(inspect.getsource(cls.__init__)) if "__init__" in vars(cls) else ""
    sets = {t.attr for n in ast.walk(ast.parse(init)) if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    return None if name in sets else f"{cls.__name__} does not set {name}"


def public(cls: type) -> set[str]:
    return {name for name in dir(cls) if not name.startswith("_") and callable(getattr(cls, name))}


def method_problem(cls: type, name: str) -> str | None:
    """Why cls does not keep the contract's method `name`, or None when it does."""
    if engine.EngineAPI not in cls.__mro__:
        return f"{cls.__name__} does not declare EngineAPI (shaped alike is not declared)"
    own = next((vars(c)[name] for c in cls.__mro__ if c is not engine.EngineAPI and name in vars(c)), None)
    if own is None:
        return f"{cls.__name__} does not define {name} (it would inherit the contract's empty body)"
    want = inspect.signature(contract()[name]).parameters
    if inspect.signature(own).parameters != want:
        return f"{cls.__name__}.{name}{inspect.signature(own)}"
    return None


def problems(cls: type) -> list[str]:
    """Everything that keeps cls from being an engine a stage may take: a method missing or unlike the
    contract's, or a public method beyond it."""
    found = [p for name in sorted(contract()) if (p := method_problem(cls, name))]
    found += [p for name in sorted(attributes()) if (p := attribute_problem(cls, name))]
    extra = public(cls) - set(contract()) - EXTRAS.get(cls, ENGINE_EXTRAS)
    if extra:
        found.append(f"{cls.__name__} has public methods beyond the contract: {', '.join(sorted(extra))}")
    return found

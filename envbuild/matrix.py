"""matrix.yaml -> validated, frozen backend objects.

The matrix is the only place a backend is described. Loading keeps the line of every key and value so
that each problem names the file, the line and the field; all problems are collected before raising.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from .errors import MatrixError, NotContainerizableError, Problem, UnknownBackendError

from .paths import DEFAULT_MATRIX, PACKAGED_MATRIX  # noqa: F401  (PACKAGED_MATRIX: for callers)
from .paths import default_matrix as default_path  # noqa: F401

UV_VERSION = "0.13.8"  # the installer image builds use when the matrix names none (PyPI `uv`)

# --------------------------------------------------------------------------------------------------
# Value checkers. Each returns (value, None) or (None, "why"). Strings that reach a Dockerfile are
# held to narrow patterns so that no value can inject an instruction (newline) or break quoting.

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TEXT = re.compile(r'^[^"\\$`\x00-\x1f\x7f]*$')
_PATTERNS = {
    "name": (re.compile(r"^[a-z][a-z0-9_-]*$"), "a lower-case name (letters, digits, '-', '_')"),
    "image": (
        re.compile(
            r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
            r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
        ),
        "an image reference such as 'debian:bookworm-slim' or 'host:5000/repo/name:tag'",
    ),
    "repository": (
        re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$"),
        "an image repository without a tag, such as 'ghcr.io/org/envbuild'",
    ),
    "url": (re.compile(r"^(?:https?|file)://[A-Za-z0-9._~:/?#\[\]@!+,=%-]+$"), "an http(s):// or file:// URL without shell metacharacters"),
    "module": (re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$"), "a dotted module name"),
    "api": (re.compile(r"^torch(?:\.[A-Za-z_][A-Za-z0-9_]*)+$"), "a dotted torch API such as 'torch.cuda.is_available'"),
    "dist": (re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?$"), "a Python distribution name"),
    "apt": (re.compile(r"^[a-z0-9][a-z0-9+.-]+(?:=[A-Za-z0-9.+:~-]+)?$"), "a Debian package name"),
    "executable": (re.compile(r"^(?:/[A-Za-z0-9_.+-]+)*/?[A-Za-z0-9_.+-]+$"), "an executable name or absolute path"),
    "env_key": (re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$"), "an environment variable name"),
    "env_value": (re.compile(r"^[^\"\\`\x00-\x1f\x7f]*$"), "a value without quotes, backslashes or control characters"),
    "device_node": (re.compile(r"^/dev/[A-Za-z0-9_./-]+(?::/dev/[A-Za-z0-9_./-]+)?$"), "a device path such as '/dev/kfd'"),
    "volume": (re.compile(r"^/[^\s:\"'`$]+:/[^\s:\"'`$]+(?::(?:ro|rw))?$"), "'HOST:CONTAINER[:ro]' with absolute paths"),
    "glob": (re.compile(r"^/[A-Za-z0-9_./*?\[\]-]+$"), "an absolute path glob such as '/dev/nvidia[0-9]*'"),
    "label": (re.compile(r"^[A-Za-z0-9_.:-]+$"), "a runner label"),
    "platform": (re.compile(r"^(?:linux|darwin)/(?:amd64|arm64|ppc64le|s390x)$"), "a platform such as 'linux/amd64'"),
    "size": (re.compile(r"^[0-9]+[bkmgBKMG]?$"), "a size such as '8g'"),
    "word": (re.compile(r"^[A-Za-z0-9_.:=-]+$"), "a single word"),
    "pci": (re.compile(r"^0x[0-9a-f]{4}$"), "a PCI vendor id such as '0x10de'"),
    "text": (_TEXT, "text without quotes, backslashes, '$', backticks or control characters"),
}


def _check_str(kind: str) -> Callable[[Any], tuple[Any, str | None]]:
    pattern, hint = _PATTERNS[kind]

    def check(value: Any) -> tuple[Any, str | None]:
        if not isinstance(value, str):
            return None, _type_message(value, "a string")
        if _CONTROL.search(value):
            return None, f"{value!r} contains a newline or control character (it would inject into a Dockerfile)"
        if not pattern.match(value):
            return None, f"{value!r} is not {hint}"
        return value, None

    return check


def _check_prose(value: Any) -> tuple[Any, str | None]:
    """Free text for people (reasons, alternatives): never rendered into a Dockerfile."""
    if not isinstance(value, str):
        return None, _type_message(value, "a string")
    if re.search(r"[\x00-\x08\x0b-\x1f\x7f]", value):
        return None, f"{value!r} contains a control character"
    return value.strip(), None


def _check_version(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, _type_message(value, "a version string") + " (quote it, e.g. \"2.13.0\")"
    if _CONTROL.search(value):
        return None, f"{value!r} contains a newline or control character (it would inject into a Dockerfile)"
    if value != value.strip():
        return None, f"{value!r} has leading or trailing spaces"
    try:
        Version(value)
    except InvalidVersion:
        return None, f"{value!r} is not a valid version (PEP 440), e.g. \"2.13.0\""
    return value, None


def _check_specifier(value: Any) -> tuple[Any, str | None]:
    if not isinstance(value, str):
        return None, _type_message(value, "a version specifier string") + " (e.g. \">=2.5,<2.6\")"
    if _CONTROL.search(value):
        return None, f"{value!r} contains a newline or control character"
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        return None, f"{value!r} is not a valid version specifier (PEP 440), e.g. \">=2.5,<2.6\""
    return value, None


def _check_bool(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, bool):
        return value, None
    return None, _type_message(value, "true or false")


def _type_message(value: Any, expected: str) -> str:
    kinds = {bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "a mapping", str: "a string"}
    got = "nothing (null)" if value is None else kinds.get(type(value), type(value).__name__)
    shown = "" if isinstance(value, (list, dict)) or value is None else f" {value!r}"
    return f"expected {expected}, got {got}{shown}"


# --------------------------------------------------------------------------------------------------
# The schema: data, not code. A field is a leaf checker, a list of a leaf, a string map, or a section.


@dataclass(frozen=True)
class _Field:
    check: Callable[[Any], tuple[Any, str | None]] | None = None
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    list_of: Callable[[Any], tuple[Any, str | None]] | None = None
    map_of: tuple[Callable, Callable] | None = None
    section: dict[str, "_Field"] | None = None


def _leaf(kind: str, **kw: Any) -> _Field:
    return _Field(check=_check_str(kind), **kw)


def _list(kind: str, **kw: Any) -> _Field:
    return _Field(list_of=_check_str(kind), default=(), **kw)


_VERSIONED = {"version": _Field(check=_check_version, required=True)}

_RUN = {
    "gpus": _leaf("word"),
    "devices": _list("device_node"),
    "runtime": _leaf("word"),
    "env": _Field(map_of=(_check_str("env_key"), _check_str("env_value")), default={}),
    "volumes": _list("volume"),
    "group_add": _list("word"),
    "ipc": _leaf("word"),
    "shm_size": _leaf("size"),
    "privileged": _Field(check=_check_bool, default=False),
    "security_opt": _list("word"),
    "cap_add": _list("word"),
    "network": _leaf("word"),
}

_BACKEND = {
    "description": _leaf("text", required=True),
    "device": _leaf("name", required=True),
    "containerizable": _Field(check=_check_bool, default=True),
    "reason": _Field(check=_check_prose),
    "alternatives": _Field(check=_check_prose),
    "base_image": _leaf("image"),
    "platforms": _list("platform", required=True),
    "python": _Field(
        section={
            "executable": _leaf("executable", default="python3"),
            "apt": _list("apt"),
        }
    ),
    "torch": _Field(
        required=True,
        section={
            "source": _leaf("word", default="pip", choices=("pip", "base")),
            "version": _Field(check=_check_version, required=True),
            "index_url": _leaf("url"),
        },
    ),
    "plugin": _Field(
        section={
            "package": _leaf("dist", required=True),
            "version": _Field(check=_check_version, required=True),
            "source": _leaf("word", default="pip", choices=("pip", "base")),
            "index_url": _leaf("url"),
            "pairing": _leaf("word", default="none", choices=("same-release", "same-minor", "local-torch", "none")),
            "torch": _Field(check=_check_specifier),
        }
    ),
    "import": _leaf("module"),
    "availability": _leaf("api"),
    "env": _Field(map_of=(_check_str("env_key"), _check_str("env_value")), default={}),
    "run": _Field(section=_RUN),
    "detect": _Field(
        section={
            "device_nodes": _list("glob"),
            "pci_vendors": _list("pci"),
            "tools": _list("word"),
            "runtimes": _list("word"),
            "os": _leaf("word", choices=("linux", "darwin")),
            "arch": _list("word"),
        }
    ),
    "ci": _Field(section={"runs_on": _list("label", required=True)}),
}

_TOP = {
    "image": _Field(
        required=True,
        section={
            "repository": _leaf("repository", required=True),
            "source": _leaf("url", required=True),
            "licenses": _leaf("word", default="Apache-2.0"),
            "vendor": _leaf("text", default="envbuild"),
        },
    ),
    "transformers": _Field(section=_VERSIONED, required=True),
    "accelerate": _Field(section=_VERSIONED, required=True),
    # The installer used inside image builds (never shipped in an image); optional, UV_VERSION by default.
    "uv": _Field(section={"version": _Field(check=_check_version, default=None)}),
    "backends": _Field(required=True),  # a mapping of name -> _BACKEND, checked below
}


# --------------------------------------------------------------------------------------------------
# The typed objects the rest of envbuild sees.


@dataclass(frozen=True)
class Torch:
    source: str  # "pip": installed from index_url; "base": the base image carries it
    version: str
    index_url: str | None


@dataclass(frozen=True)
class Plugin:
    package: str
    version: str
    source: str
    index_url: str | None
    pairing: str
    torch: str | None


@dataclass(frozen=True)
class RunSpec:
    """What `docker run` needs to expose the device."""

    gpus: str | None = None
    devices: tuple[str, ...] = ()
    runtime: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    volumes: tuple[str, ...] = ()
    group_add: tuple[str, ...] = ()
    ipc: str | None = None
    shm_size: str | None = None
    privileged: bool = False
    security_opt: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    network: str | None = None

    def docker_args(self) -> list[str]:
        """The `docker run` flags, in a stable order."""
        args: list[str] = []
        if self.gpus:
            args.append(f"--gpus={self.gpus}")
        if self.runtime:
            args.append(f"--runtime={self.runtime}")
        for dev in self.devices:
            args += ["--device", dev]
        for vol in self.volumes:
            args += ["-v", vol]
        for group in self.group_add:
            args += ["--group-add", group]
        for key, value in self.env:
            args += ["-e", f"{key}={value}"]
        for cap in self.cap_add:
            args.append(f"--cap-add={cap}")
        for opt in self.security_opt:
            args += ["--security-opt", opt]
        if self.ipc:
            args.append(f"--ipc={self.ipc}")
        if self.network:
            args.append(f"--net={self.network}")
        if self.shm_size:
            args += ["--shm-size", self.shm_size]
        if self.privileged:
            args.append("--privileged")
        return args


@dataclass(frozen=True)
class Detect:
    device_nodes: tuple[str, ...] = ()
    pci_vendors: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ()
    os: str | None = None
    arch: tuple[str, ...] = ()


@dataclass(frozen=True)
class Python:
    executable: str = "python3"
    apt: tuple[str, ...] = ()


@dataclass(frozen=True)
class Backend:
    name: str
    description: str
    device: str
    containerizable: bool
    reason: str | None
    alternatives: str | None
    base_image: str | None
    platforms: tuple[str, ...]
    python: Python
    torch: Torch
    plugin: Plugin | None
    import_module: str | None
    availability: str | None
    env: tuple[tuple[str, str], ...]
    run: RunSpec
    detect: Detect
    runs_on: tuple[str, ...]

    @property
    def pins(self) -> dict[str, str]:
        """Distribution -> version for what this backend's image must carry (plus the shared pins)."""
        pins = {"torch": self.torch.version}
        if self.plugin:
            pins[self.plugin.package] = self.plugin.version
        return pins


@dataclass(frozen=True)
class Image:
    repository: str
    source: str
    licenses: str
    vendor: str


@dataclass(frozen=True)
class Matrix:
    path: str
    image: Image
    transformers: str
    accelerate: str
    backends: tuple[Backend, ...] = field(default=())
    uv: str = UV_VERSION  # the build-time installer, bind-mounted into install steps

    @property
    def names(self) -> list[str]:
        return [b.name for b in self.backends]

    def backend(self, name: str) -> Backend:
        for b in self.backends:
            if b.name == name:
                return b
        raise UnknownBackendError(name, self.names)

    def containerizable(self) -> list[Backend]:
        return [b for b in self.backends if b.containerizable]

    def select(self, names: Iterable[str], *, containers_only: bool = True) -> list[Backend]:
        """Backends by name ('all' = every containerizable one); refuses non-containerizable ones."""
        names = list(names)
        if not names or "all" in names:
            return self.containerizable()
        chosen = [self.backend(n) for n in dict.fromkeys(names)]
        if containers_only:
            for b in chosen:
                if not b.containerizable:
                    raise NotContainerizableError(not_containerizable_message(b))
        return chosen

    def tags(self, backend: Backend) -> list[str]:
        """Default image tags: a moving one and a fully pinned one."""
        pinned = f"{backend.name}-torch{backend.torch.version}"
        if backend.plugin:
            pinned += f"-{backend.plugin.package}{backend.plugin.version}"
        pinned += f"-transformers{self.transformers}"
        pinned = re.sub(r"[^A-Za-z0-9_.-]", "_", pinned)[:128]
        return [f"{self.image.repository}:{backend.name}", f"{self.image.repository}:{pinned}"]


def not_containerizable_message(backend: Backend) -> str:
    msg = f"backend '{backend.name}' cannot run in a container: {backend.reason or 'no container can reach it'}"
    if backend.alternatives:
        msg += f" Instead: {backend.alternatives}"
    return msg


# --------------------------------------------------------------------------------------------------
# Loading YAML with locations, and rejecting duplicate keys (loaders silently keep the last one).

Path_ = tuple[str, ...]


class _Located:
    def __init__(self, source: str):
        self.source = source
        self.lines: dict[Path_, int] = {}  # path -> line of its key (or of the value for the root)
        self.override: dict[Path_, str] = {}  # path -> the --set text that produced it
        self.problems: list[Problem] = []

    def at(self, path: Path_, message: str) -> None:
        for i in range(len(path), -1, -1):
            if path[:i] in self.override:
                self.problems.append(Problem(self.override[path[:i]], None, message))
                return
            if path[:i] in self.lines:
                self.problems.append(Problem(self.source, self.lines[path[:i]], message))
                return
        self.problems.append(Problem(self.source, None, message))


def _dotted(path: Path_) -> str:
    return ".".join(path) if path else "the top level"


def _to_python(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, loc: _Located) -> Any:
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                loc.problems.append(Problem(loc.source, key_node.start_mark.line + 1, f"a key in {_dotted(path)} must be a plain name"))
                continue
            key = str(loader.construct_object(key_node))
            line = key_node.start_mark.line + 1
            if key in out:
                first = loc.lines.get(path + (key,))
                loc.problems.append(
                    Problem(loc.source, line, f"duplicate key '{key}' in {_dotted(path)} (first defined at line {first}; YAML would silently keep the last)")
                )
                continue
            loc.lines[path + (key,)] = line
            out[key] = _to_python(loader, value_node, path + (key,), loc)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for i, item in enumerate(node.value):
            loc.lines.setdefault(path + (str(i),), item.start_mark.line + 1)
            items.append(_to_python(loader, item, path + (str(i),), loc))
        return items
    return loader.construct_object(node)


# libyaml's loader when PyYAML has it: the same nodes and marks, parsed about ten times faster (every
# command loads the matrix, also a no-op rebuild).
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _parse(text: str, source: str) -> tuple[Any, _Located]:
    loc = _Located(source)
    if not text.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in text.splitlines()):
        raise MatrixError([Problem(source, None, "the matrix is empty; expected a mapping with 'image', 'transformers', 'accelerate' and 'backends'")])
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise MatrixError([Problem(source, None, "the matrix is empty")])
        loc.lines[()] = node.start_mark.line + 1
        tree = _to_python(loader, node, (), loc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = exc.problem or exc.context or "invalid YAML"
        raise MatrixError([Problem(source, line, f"YAML syntax error: {what}")]) from None
    except yaml.YAMLError as exc:
        raise MatrixError([Problem(source, None, f"YAML error: {exc}")]) from None
    finally:
        loader.dispose()
    return tree, loc


# --------------------------------------------------------------------------------------------------
# --set DOTTED.PATH=VALUE overrides, applied to the raw tree so they are validated like the file.


def apply_overrides(tree: Any, overrides: Iterable[str], loc: _Located) -> None:
    for text in overrides:
        where = f"--set {text}"
        key, sep, raw = text.partition("=")
        path = tuple(p for p in key.strip().split("."))
        if not sep or not key.strip() or any(not p for p in path):
            loc.problems.append(Problem(where, None, "expected DOTTED.PATH=VALUE, e.g. backends.cpu.torch.version=2.13.0"))
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = raw.strip()  # versions such as 2.13 stay text
        backends = tree.get("backends") if isinstance(tree, dict) else None
        if path[0] == "backends" and len(path) > 2 and isinstance(backends, dict) and path[1] not in backends:
            hint = difflib.get_close_matches(path[1], list(backends), n=1)
            did_you_mean = f"did you mean '{hint[0]}'?" if hint else f"valid backends: {', '.join(backends)}"
            loc.problems.append(Problem(where, None, f"unknown backend '{path[1]}' ({did_you_mean})"))
            continue
        node = tree
        for i, part in enumerate(path[:-1]):
            if not isinstance(node, dict):
                loc.problems.append(Problem(where, None, f"{_dotted(path[:i])} is not a mapping"))
                break
            if part not in node:
                loc.override[path[: i + 1]] = where  # a section this --set created is its own
            node = node.setdefault(part, {})
        else:
            if not isinstance(node, dict):
                loc.problems.append(Problem(where, None, f"{_dotted(path[:-1])} is not a mapping"))
                continue
            node[path[-1]] = value
            loc.override[path] = where


# --------------------------------------------------------------------------------------------------
# Validation.


def _validate_section(data: Any, schema: dict[str, _Field], path: Path_, loc: _Located) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        loc.at(path, f"{_dotted(path)}: {_type_message(data, 'a mapping')}")
        return None
    out: dict[str, Any] = {}
    suggested: set[str] = set()  # a typo already reported: do not also call its target missing
    for key in data:
        if key not in schema:
            hint = difflib.get_close_matches(key, list(schema), n=1)
            suggested.update(hint)
            did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else f" (known keys: {', '.join(schema)})"
            loc.at(path + (key,), f"unknown key '{key}' in {_dotted(path)}{did_you_mean}")
    for key, spec in schema.items():
        sub = path + (key,)
        if key not in data or data[key] is None and spec.required:
            if spec.required and key not in suggested:
                loc.at(path, f"missing required key '{key}' in {_dotted(path)}")
            out[key] = spec.default
            continue
        out[key] = _validate_value(data[key], spec, sub, loc)
    return out


def _validate_value(value: Any, spec: _Field, path: Path_, loc: _Located) -> Any:
    name = _dotted(path)
    if value is None:
        return spec.default
    if spec.section is not None:
        return _validate_section(value, spec.section, path, loc)
    if spec.list_of is not None:
        if not isinstance(value, list):
            loc.at(path, f"{name}: {_type_message(value, 'a list')}")
            return ()
        items = []
        for i, item in enumerate(value):
            checked, why = spec.list_of(item)
            if why:
                loc.at(path + (str(i),), f"{name}[{i}]: {why}")
            else:
                items.append(checked)
        if spec.required and not items and not any(p.message.startswith(name) for p in loc.problems):
            loc.at(path, f"{name}: must list at least one entry")
        return tuple(items)
    if spec.map_of is not None:
        if not isinstance(value, dict):
            loc.at(path, f"{name}: {_type_message(value, 'a mapping of NAME: value')}")
            return {}
        key_check, value_check = spec.map_of
        out = {}
        for k, v in value.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                v = str(v)
            _, why_k = key_check(k)
            checked, why_v = value_check(v)
            if why_k or why_v:
                loc.at(path + (k,), f"{name}.{k}: {why_k or why_v}")
            else:
                out[k] = checked
        return out
    if spec.check is None:  # validated by its owner (the backends mapping)
        return value
    checked, why = spec.check(value)
    if why:
        loc.at(path, f"{name}: {why}")
        return spec.default
    if spec.choices and checked not in spec.choices:
        loc.at(path, f"{name}: {checked!r} is not one of: {', '.join(spec.choices)}")
        return spec.default
    return checked


def _check_pairing(b: dict[str, Any], path: Path_, loc: _Located) -> None:
    plugin, torch = b.get("plugin"), b.get("torch")
    if not plugin or not torch or not plugin.get("version") or not torch.get("version"):
        return
    pv, tv = Version(plugin["version"]), Version(torch["version"])
    release = lambda v: (v.release + (0, 0, 0))[:3]  # noqa: E731  ("2.14" is 2.14.0)
    rule = plugin.get("pairing")
    where = path + ("plugin", "version")
    if rule == "same-release" and release(pv) != release(tv):
        loc.at(
            where,
            f"{_dotted(where)}: {plugin['package']} {plugin['version']} does not pair with torch {torch['version']} "
            f"(rule same-release: the plugin's X.Y.Z must equal torch's)",
        )
    if rule == "same-minor" and pv.release[:2] != tv.release[:2]:
        loc.at(
            where,
            f"{_dotted(where)}: {plugin['package']} {plugin['version']} does not pair with torch {torch['version']} "
            f"(rule same-minor: the plugin's X.Y must equal torch's)",
        )
    if rule == "local-torch" and pv.local != f"torch{tv.public}":
        loc.at(
            where,
            f"{_dotted(where)}: {plugin['package']} {plugin['version']} does not pair with torch {torch['version']} "
            f"(rule local-torch: the version must end in '+torch{tv.public}')",
        )
    if plugin.get("torch") and not SpecifierSet(plugin["torch"]).contains(tv, prereleases=True):
        loc.at(
            path + ("plugin", "torch"),
            f"{_dotted(path + ('plugin', 'torch'))}: torch {torch['version']} is outside the plugin's supported range '{plugin['torch']}'",
        )


def _check_backend(name: str, b: dict[str, Any], raw: dict[str, Any], path: Path_, loc: _Located) -> None:
    """Rules across fields. `raw` tells a missing key from one that was present but invalid (already reported)."""
    typo = lambda key: any(difflib.get_close_matches(k, [key], n=1) for k in raw if k not in _BACKEND)  # noqa: E731
    if b.get("containerizable"):
        if "base_image" not in raw and not typo("base_image"):
            loc.at(path, f"missing required key 'base_image' in {_dotted(path)} (needed by a containerizable backend)")
        if "ci" not in raw and not typo("ci"):
            loc.at(path, f"missing required key 'ci' in {_dotted(path)} (runner labels for its CI jobs)")
        if any(p.startswith("darwin/") for p in b.get("platforms") or ()):
            loc.at(path + ("platforms",), f"{_dotted(path + ('platforms',))}: a container image cannot target darwin")
    elif "reason" not in raw and not typo("reason"):
        loc.at(path, f"missing required key 'reason' in {_dotted(path)} (say why it cannot run in a container)")
    torch = b.get("torch") or {}
    raw_torch = raw.get("torch") if isinstance(raw.get("torch"), dict) else {}
    if torch.get("source") == "pip" and "index_url" not in raw_torch and b.get("containerizable") and torch.get("version"):
        loc.at(path + ("torch",), f"missing required key 'index_url' in {_dotted(path + ('torch',))} (torch comes from pip)")
    if b.get("device") and b.get("device") != "cpu" and "availability" not in raw and not typo("availability"):
        loc.at(path, f"missing required key 'availability' in {_dotted(path)} (the API that proves the '{b.get('device')}' device)")
    if b.get("plugin") and "import" not in raw and not typo("import"):
        loc.at(path, f"missing required key 'import' in {_dotted(path)} (the module that registers the plugin's device)")
    _check_pairing(b, path, loc)


def _build(data: dict[str, Any], source: str, loc: _Located) -> Matrix | None:
    top = _validate_section(data, _TOP, (), loc)
    backends_raw = data.get("backends") if isinstance(data, dict) else None
    backends: list[Backend] = []
    if isinstance(backends_raw, dict):
        if not backends_raw:
            loc.at(("backends",), "backends: lists no backend")
        for name, raw in backends_raw.items():
            path = ("backends", name)
            _, why = _check_str("name")(name)
            if why:
                loc.at(path, f"backend name {why}")
                continue
            b = _validate_section(raw, _BACKEND, path, loc)
            if b is None:
                continue
            _check_backend(name, b, raw, path, loc)
            backends.append(_make_backend(name, b))
    elif "backends" in (data or {}):
        loc.at(("backends",), f"backends: {_type_message(backends_raw, 'a mapping of backend name -> settings')}")
    if loc.problems or top is None:
        return None
    return Matrix(
        path=source,
        image=Image(**top["image"]),
        transformers=top["transformers"]["version"],
        accelerate=top["accelerate"]["version"],
        backends=tuple(backends),
        **({"uv": top["uv"]["version"]} if (top.get("uv") or {}).get("version") else {}),
    )


def _make_backend(name: str, b: dict[str, Any]) -> Backend:
    run = b.get("run") or {}
    det = b.get("detect") or {}
    torch = b.get("torch") or {"source": "pip", "version": "0", "index_url": None}
    return Backend(
        name=name,
        description=b["description"] or "",
        device=b["device"] or "",
        containerizable=bool(b["containerizable"]),
        reason=b["reason"],
        alternatives=b["alternatives"],
        base_image=b["base_image"],
        platforms=tuple(b["platforms"] or ()),
        python=Python(**(b.get("python") or {})),
        torch=Torch(**torch),
        plugin=Plugin(**b["plugin"]) if b.get("plugin") else None,
        import_module=b["import"],
        availability=b["availability"],
        env=tuple(sorted((b.get("env") or {}).items())),
        run=RunSpec(**{**run, "env": tuple(sorted((run.get("env") or {}).items()))}) if run else RunSpec(),
        detect=Detect(**det) if det else Detect(),
        runs_on=tuple((b.get("ci") or {}).get("runs_on") or ()),
    )


def loads(text: str, source: str = DEFAULT_MATRIX, overrides: Iterable[str] = ()) -> Matrix:
    tree, loc = _parse(text, source)
    overrides = list(overrides)
    if overrides:
        if not isinstance(tree, dict):
            tree = {}
        apply_overrides(tree, overrides, loc)
    if not isinstance(tree, dict):
        loc.at((), f"the matrix must be a mapping with 'image', 'transformers', 'accelerate' and 'backends', got {_type_message(tree, 'a mapping')[len('expected a mapping, got '):]}")
        raise MatrixError(loc.problems)
    matrix = _build(tree, source, loc)
    if loc.problems or matrix is None:
        raise MatrixError(loc.problems)
    return matrix


def load(path: str | Path = DEFAULT_MATRIX, overrides: Iterable[str] = ()) -> Matrix:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise MatrixError([Problem(str(path), None, "no such file (pass --matrix FILE, or run from the envbuild checkout)")]) from None
    except OSError as exc:
        raise MatrixError([Problem(str(path), None, f"cannot read: {exc.strerror}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise MatrixError([Problem(str(path), line, "not UTF-8 text")]) from None
    return loads(text, str(path), overrides)

"""matrix.yaml (plus --set overrides) -> a validated Matrix.

Loading keeps the line of every key and value so that each problem names the file, the line and the
field; all problems are collected before raising. Only this module reads the matrix file.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, Iterable

import yaml
from packaging.version import Version

from envbuild.core.errors import EnvbuildError, MatrixError, Problem
from envbuild.core.files import read_project
from envbuild.core.output import scrub
from envbuild.core.paths import DEFAULT_MATRIX, packaged_within
from envbuild.core.platform import Platform
from envbuild.core.text import shown, unsafe_char
from envbuild.matrix import rules, stacks
from envbuild.matrix.facts import Facts, path_for, problems as fact_problems, read as read_facts
from envbuild.matrix.model import Backend, Compile, Detect, HostNeeds, Image, Index, Matrix, Pin, Plugin, Python, RunSpec, Torch
from envbuild.matrix.schema import BACKEND, TOP, Field, check_str, type_message

# --------------------------------------------------------------------------------------------------
# Loading YAML with locations, and rejecting duplicate keys (loaders silently keep the last one).

Path_ = tuple[str, ...]


# The product's matrix has about 700 values: YAML aliases may not make one expand past this ("billion laughs").
MAX_VALUES = 50_000
MAX_MATRIX = 4 << 20  # bytes: the product's matrix is about 15 KB


class _Located:
    def __init__(self, source: str):
        self.source = source
        self.lines: dict[Path_, int] = {}  # path -> line of its key (or of the value for the root)
        self.override: dict[Path_, str] = {}  # path -> the --set text that produced it
        self.problems: list[Problem] = []
        self.values = 0  # how many values the YAML expanded to so far (aliases counted each time)
        self.open: set[int] = set()  # the nodes being converted: meeting one again is an alias to itself
        self.variant_of: dict[str, str] = {}  # variant -> its base: what it inherits is placed where the base got it

    def at(self, path: Path_, message: str, related: tuple[Path_, ...] = ()) -> None:
        """Record a problem where it comes from: the --set that replaced the value (or a section above it), or one
        of the `related` fields the problem also turns on (a pairing's other half, a removed key) first, else the
        line of the nearest key in the file."""
        missing = re.match(r"missing required key '([^']+)'", message)
        paths = [path, *related, *((path + (missing.group(1),),) if missing else ())]
        for p in list(paths):  # a variant's settings are its base's and its variant_of's doing too
            if len(p) > 1 and p[0] == "backends" and p[1] in self.variant_of:
                paths += [("backends", self.variant_of[p[1]], *p[2:]), ("backends", p[1], "variant_of")]
        for p in paths:
            for i in range(len(p), 0 if p else -1, -1):
                if p[:i] in self.override:
                    self.problems.append(Problem(self.override[p[:i]], None, message))
                    return
        if () in self.override:
            self.problems.append(Problem(self.override[()], None, message))
            return
        for i in range(len(path), -1, -1):
            if path[:i] in self.lines:
                self.problems.append(Problem(self.source, self.lines[path[:i]], message))
                return
        self.problems.append(Problem(self.source, None, message))



def _close_matches(word: str, choices: list[str], n: int = 1) -> list[str]:
    return difflib.get_close_matches(word, choices, n=n)

def _dotted(path: Path_) -> str:
    return ".".join(shown(p) for p in path) if path else "the top level"


def _to_python(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, loc: _Located) -> Any:
    loc.values += 1
    if loc.values > MAX_VALUES:
        raise MatrixError([Problem(loc.source, node.start_mark.line + 1, f"{_dotted(path)}: the YAML expands to more than "
                                   f"{MAX_VALUES:,} values (aliases of aliases?); a matrix needs far fewer")])
    if id(node) in loc.open:
        loc.problems.append(Problem(loc.source, node.start_mark.line + 1, f"{_dotted(path)}: a YAML alias refers to itself"))
        return None
    if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
        loc.open.add(id(node))
        try:
            return _collection(loader, node, path, loc)
        finally:
            loc.open.discard(id(node))
    return loader.construct_object(node)


def _collection(loader: yaml.SafeLoader, node: yaml.Node, path: Path_, loc: _Located) -> Any:
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
                    Problem(loc.source, line, f"duplicate key '{shown(key)}' in {_dotted(path)} (first defined at line {first}; YAML would silently keep the last)")
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


def _set_value(raw: str, path: Path_, where: str, loc: _Located) -> Any:
    """A --set value as YAML (bounded, keys as text, like the file's); text that is not YAML stays text."""
    if not raw.strip():
        return ""
    if unsafe_char(raw, allow="\n\t") is not None:
        return raw  # never YAML: the value check refuses it by name (a control, or bytes that were not UTF-8)
    loader = _Loader(raw)
    scratch = _Located(where)
    try:
        node = loader.get_single_node()
        value = raw if node is None else _to_python(loader, node, path, scratch)
    except MatrixError as exc:  # too large: said of this --set
        scratch.problems += exc.problems
        value = None
    except (yaml.YAMLError, UnicodeError):  # not YAML (or not encodable: bytes that were not UTF-8): the text
        value = raw
    finally:
        loader.dispose()
    loc.problems += [Problem(where, None, p.message) for p in scratch.problems]
    return value


def _holds_secret(value: Any) -> bool:
    text = value if isinstance(value, str) else repr(value)
    return scrub(text[:100_000]) != text[:100_000]


def _put(tree: dict, path: Path_, value: Any, where: str, loc: _Located) -> None:
    """One override (a --set, a settings file's [matrix] field) written into the raw tree, `where` its origin."""
    backends = tree.get("backends")
    if path[0] == "backends" and len(path) > 2 and isinstance(backends, dict) and path[1] not in backends:
        hint = _close_matches(path[1], list(backends), n=1)
        did_you_mean = f"did you mean '{hint[0]}'?" if hint else f"valid backends: {', '.join(backends)}"
        loc.problems.append(Problem(where, None, f"unknown backend '{path[1]}' ({did_you_mean})"))
        return
    node = tree
    for i, part in enumerate(path[:-1]):
        if not isinstance(node, dict):
            loc.problems.append(Problem(where, None, f"{_dotted(path[:i])} is not a mapping"))
            return
        if part not in node:
            loc.override[path[: i + 1]] = where  # a section this override created is its own
        node = node.setdefault(part, {})
    if not isinstance(node, dict):
        loc.problems.append(Problem(where, None, f"{_dotted(path[:-1])} is not a mapping"))
        return
    node[path[-1]] = value
    loc.override[path] = where


def apply_overrides(tree: Any, overrides: Iterable[str], loc: _Located) -> None:
    for text in overrides:
        where = f"--set {text}"
        key, sep, raw = text.partition("=")
        path = tuple(p for p in key.strip().split("."))
        if not sep or not key.strip() or any(not p for p in path):
            loc.problems.append(Problem(where, None, "expected DOTTED.PATH=VALUE, e.g. backends.cpu.torch.version=2.13.0"))
            continue
        value = _set_value(raw, path, where, loc)
        if _holds_secret(value):  # however the argument spelled it (YAML escapes), its value is not echoed back
            where = f"--set {key.strip()}=*** (a secret: not shown)"
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = raw.strip()  # versions such as 2.13 stay text
        _put(tree, path, value, where, loc)


def apply_site(tree: Any, fields: Iterable[tuple[Path_, Any, str]], loc: _Located) -> None:
    """A site's [matrix] fields (core/settings.py), before any --set: a path that starts with a top-level key
    (image.repository) or `backends` is the matrix's; one that starts with a backend's name (cpu.torch.version) is
    that backend's; any other (torch.index_url) is every backend's. `where` is the file and line that said it."""
    backends = tree.get("backends") if isinstance(tree.get("backends"), dict) else {}
    for path, value, where in fields:
        if path[0] == "backends" or path[0] in TOP:
            paths = [path]
        elif len(path) > 1 and (path[0] in backends or path[0] not in BACKEND):
            paths = [("backends",) + path]  # a backend's (a name it lacks is refused with the names it has)
        else:
            paths = [("backends", name) + path for name in backends]
        for one in paths:
            _put(tree, one, value, where, loc)


# --------------------------------------------------------------------------------------------------
# Validation.


def _validate_section(data: Any, schema: dict[str, Field], path: Path_, loc: _Located) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        loc.at(path, f"{_dotted(path)}: {type_message(data, 'a mapping')}")
        return None
    out: dict[str, Any] = {}
    suggested: set[str] = set()  # a typo already reported: do not also call its target missing
    for key in data:
        if key not in schema:
            hint = _close_matches(key, list(schema), n=1)
            suggested.update(hint)
            did_you_mean = f" (did you mean '{hint[0]}'?)" if hint else f" (known keys: {', '.join(schema)})"
            loc.at(path + (key,), f"unknown key '{shown(key)}' in {_dotted(path)}{did_you_mean}")
    for key, spec in schema.items():
        sub = path + (key,)
        if key not in data or data[key] is None and spec.required:
            if spec.required and key not in suggested:
                loc.at(path, f"missing required key '{key}' in {_dotted(path)}")
            out[key] = spec.default
            continue
        out[key] = _validate_value(data[key], spec, sub, loc)
    return out


def _validate_value(value: Any, spec: Field, path: Path_, loc: _Located) -> Any:
    name = _dotted(path)
    if value is None:
        return spec.default
    if spec.section is not None:
        return _validate_section(value, spec.section, path, loc)
    if spec.list_of is not None:
        if not isinstance(value, list):
            loc.at(path, f"{name}: {type_message(value, 'a list')}")
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
            loc.at(path, f"{name}: {type_message(value, 'a mapping of NAME: value')}")
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
    where = path + ("plugin", "version")
    why = rules.plugin_fits(plugin.get("pairing") or "none", plugin["version"], torch["version"])
    if why:
        loc.at(where, f"{_dotted(where)}: {plugin['package']} {plugin['version']} does not pair with torch {torch['version']} ({why})",
               related=(path + ("torch", "version"), path + ("plugin", "pairing")))
    if not rules.in_range(plugin.get("torch"), torch["version"]):
        loc.at(
            path + ("plugin", "torch"),
            f"{_dotted(path + ('plugin', 'torch'))}: torch {torch['version']} is outside the plugin's supported range '{plugin['torch']}'",
            related=(path + ("torch", "version"),),
        )


def _check_torch_required(top: dict[str, Any], b: dict[str, Any], path: Path_, loc: _Located) -> None:
    """Every backend's torch carries the transformers and accelerate the matrix pins (their declared minimum)."""
    version = (b.get("torch") or {}).get("version")
    if not version:
        return
    for dist in ("transformers", "accelerate"):
        own = bool(b.get(dist))
        pin = (b.get(dist) if own else top.get(dist)) or {}
        if not pin.get("version") or not pin.get("torch"):
            continue
        why = rules.torch_required(dist, pin["version"], pin["torch"], version)
        if why:
            key = (*path, dist, "torch") if own else (dist, "torch")
            line = loc.lines.get(key)
            recorded = loc.override.get(key) or (f"{_dotted(key)} at {loc.source}:{line}" if line else _dotted(key))
            effect = ("transformers then runs without PyTorch and no model loads" if dist == "transformers"
                      else "accelerate cannot be installed next to it")
            where = path + ("torch", "version")
            loc.at(where, f"{_dotted(where)}: {why} ({recorded}); {effect}: pin a torch that fits, or an older "
                          f"{dist} for the whole matrix (`envbuild outdated` names the newest that fits)",
                   related=((dist, "torch"), (dist, "version")))


ACCELERATOR_API = Version("2.6")  # torch.accelerator answers for every device type from here on


def _check_availability(b: dict[str, Any], raw: dict[str, Any], path: Path_, loc: _Located, typo: bool) -> None:
    """One way to ask for the device: torch.accelerator where the torch has it, the matrix's call where not."""
    version = (b.get("torch") or {}).get("version")
    if not b.get("device") or b.get("device") == "cpu" or not version:
        return
    old = Version(version).release < ACCELERATOR_API.release
    if old and "availability" not in raw and not typo:
        loc.at(path, f"missing required key 'availability' in {_dotted(path)} (torch {version} predates torch.accelerator: "
                     f"the API that proves the '{b.get('device')}' device, e.g. torch.{b.get('device')}.is_available)",
               related=(path + ("torch", "version"),))
    elif not old and b.get("availability"):
        loc.at(path + ("availability",), f"{_dotted(path + ('availability',))}: not used: torch {version} answers through "
                                         "torch.accelerator (PyTorch 2.6 and later); remove it", related=(path + ("torch", "version"),))


def _check_stack(b: dict[str, Any], path: Path_, loc: _Located) -> None:
    """The base's accelerator stack release, host.version, the torch index for it and the driver minimum are one
    fact: they must agree (bump moves them together)."""
    h = b.get("host") or {}
    if not h.get("stack") or not h.get("version"):
        return
    stack = stacks.STACKS[h["stack"]]
    where = path + ("host", "version")
    carried = stacks.image_release(stack, b.get("base_image"), h["version"])
    if carried is not None and carried != h["version"]:
        loc.at(where, f"{_dotted(where)}: '{h['version']}', but the base image {b['base_image']} carries {stack.title} "
                      f"{carried}: state the base's release (the driver minimum and the torch index follow it)",
               related=(path + ("base_image",), path + ("host", "stack")))
        return
    torch = b.get("torch") or {}
    want = stacks.torch_index(stack, h["version"], torch.get("index_url")) if torch.get("source") == "pip" else None
    if want and want != torch.get("index_url"):
        at = path + ("torch", "index_url")
        loc.at(at, f"{_dotted(at)}: {torch['index_url']} is not the torch index for {stack.title} {h['version']} "
                   f"(host.version): {want}", related=(where, path + ("host", "stack"), path + ("torch", "source")))
    for key in ("arch", "arch_arm64"):  # a declared architecture the stack's release cannot build for
        for i, arch in enumerate(h.get(key) or ()):
            why = stacks.arch_beyond(stack, h["version"], arch)
            if why:
                at = path + ("host", key, i)
                loc.at(at, f"{_dotted(path + ('host', key))}: {arch}: {why}; a torch built with it carries no such code",
                       related=(where,))
    if stack.confirmed and not h.get("driver") and stacks.minimum_driver(stack, h["version"]) is None:
        loc.at(where, f"{_dotted(where)}: no minimum {stack.driver_title} is known for {stack.title} {h['version']} "
                      f"({stack.source}, envbuild/matrix/stacks/{stack.name}.py): add its row there, or state host.driver with its source",
               related=(path + ("host", "stack"), path + ("host", "driver")))


def _check_families(backends: list[Backend], loc: _Located) -> None:
    """A family's plain name (cuda, its `:cuda` tag) is its newest image: no variant carries a newer stack."""
    by_name = {b.name: b for b in backends}
    for v in backends:
        base = by_name.get(v.variant_of or "")
        if base is None or not (v.host and base.host):
            continue
        have, newest = stacks.parse_version(v.host.version), stacks.parse_version(base.host.version)
        if have is not None and newest is not None and have > newest:
            where = ("backends", v.name, "host", "version")
            loc.at(where, f"{_dotted(where)}: {v.host.version} is newer than {base.name}'s {base.host.version}: a "
                          f"backend's plain name (:{base.name}) is its newest image; make {v.name} the backend and "
                          f"{base.name} its variant", related=(("backends", base.name, "host", "version"),))


def _check_backend(b: dict[str, Any], raw: dict[str, Any], path: Path_, loc: _Located) -> None:
    """Rules across fields. `raw` tells a missing key from one that was present but invalid (already reported)."""
    typo = lambda key: any(_close_matches(k, [key], n=1) for k in raw if k not in BACKEND)  # noqa: E731
    if b.get("containerizable"):
        if "base_image" not in raw and not typo("base_image"):
            loc.at(path, f"missing required key 'base_image' in {_dotted(path)} (needed by a containerizable backend)",
                   related=(path + ("containerizable",),))
        if "ci" not in raw and not typo("ci"):
            loc.at(path, f"missing required key 'ci' in {_dotted(path)} (runner labels for its CI jobs)",
                   related=(path + ("containerizable",),))
        if any(p.startswith("darwin/") for p in b.get("platforms") or ()):
            loc.at(path + ("platforms",), f"{_dotted(path + ('platforms',))}: a container image cannot target darwin",
                   related=(path + ("containerizable",),))
    elif "reason" not in raw and not typo("reason"):
        loc.at(path, f"missing required key 'reason' in {_dotted(path)} (say why it cannot run in a container)",
               related=(path + ("containerizable",),))
    torch = b.get("torch") or {}
    raw_torch = raw.get("torch") if isinstance(raw.get("torch"), dict) else {}
    if torch.get("source") == "pip" and "index_url" not in raw_torch and b.get("containerizable") and torch.get("version"):
        loc.at(path + ("torch",), f"missing required key 'index_url' in {_dotted(path + ('torch',))} (torch comes from pip)",
               related=(path + ("torch", "source"), path + ("containerizable",)))
    _check_availability(b, raw, path, loc, typo("availability"))
    if b.get("plugin") and "import" not in raw and not typo("import"):
        loc.at(path, f"missing required key 'import' in {_dotted(path)} (the module that registers the plugin's device)",
               related=(path + ("plugin",),))
    _check_pairing(b, path, loc)
    _check_stack(b, path, loc)


def _merged(base: Any, over: Any) -> Any:
    """`over` on top of `base`: mappings merge key by key, anything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in over.items()}}
    return over


def _with_variants(backends: dict[str, Any], loc: _Located) -> dict[str, Any]:
    """Each variant (variant_of: NAME) as its base backend's settings with its own on top; one level deep."""
    out = {}
    for name, raw in backends.items():
        of = raw.get("variant_of") if isinstance(raw, dict) else None
        if of is None:
            out[name] = raw
            continue
        path = ("backends", name, "variant_of")
        base = backends.get(of) if isinstance(of, str) else None
        _, why = check_str("name")(of)
        if why:
            loc.at(path, f"{_dotted(path)}: {why}")
        elif not isinstance(base, dict) or of == name:
            valid = ", ".join(n for n in backends if n != name)
            loc.at(path, f"{_dotted(path)}: '{of}' is not another backend of this matrix (valid: {valid})")
        elif base.get("variant_of") is not None:
            loc.variant_of[name] = of  # placed where its base became a variant (a --set there)
            loc.at(path, f"{_dotted(path)}: '{of}' is itself a variant (of '{base.get('variant_of')}'): name that one")
        else:
            loc.variant_of[name] = of
            over = {k: v for k, v in raw.items() if k != "variant_of"}
            if "device" in over and over["device"] != base.get("device"):
                loc.at(("backends", name, "device"), f"backends.{name}.device: a variant keeps its base's device "
                                                     f"('{base.get('device')}')", related=(path, ("backends", of, "device")))
            out[name] = {**_merged(base, over), "variant_of": of}
    return out  # a variant whose variant_of was refused is not checked further: its settings are half of a backend


def _build(data: dict[str, Any], source: str, loc: _Located) -> Matrix | None:
    top = _validate_section(data, TOP, (), loc)
    backends_raw = data.get("backends") if isinstance(data, dict) else None
    backends: list[Backend] = []
    if isinstance(backends_raw, dict):
        if not backends_raw:
            loc.at(("backends",), "backends: lists no backend")
        backends_raw = _with_variants(backends_raw, loc)
        for name, raw in backends_raw.items():
            path = ("backends", name)
            _, why = check_str("name")(name)
            if why:
                loc.at(path, f"backend name {why}")
                continue
            b = _validate_section(raw, BACKEND, path, loc)
            if b is None:
                continue
            _check_backend(b, raw, path, loc)
            if top is not None:
                _check_torch_required(top, b, path, loc)
            backends.append(_make_backend(name, b))
    elif "backends" in (data or {}):
        loc.at(("backends",), f"backends: {type_message(backends_raw, 'a mapping of backend name -> settings')}")
    _check_families(backends, loc)
    if loc.problems or top is None:
        return None
    return Matrix(
        path=source,
        image=Image(**top["image"]),
        transformers=top["transformers"]["version"],
        accelerate=top["accelerate"]["version"],
        transformers_torch=top["transformers"].get("torch"),
        accelerate_torch=top["accelerate"].get("torch"),
        uv=top["uv"]["version"],
        avoid=tuple((d, tuple(top[d].get("avoid") or ())) for d in ("transformers", "accelerate", "uv") if top[d].get("avoid")),
        backends=tuple(backends),
        packages=tuple(top["packages"] or ()),
        index=Index(**(top.get("index") or {"url": "https://pypi.org/simple", "extra_urls": ()})),
        trust_key=_trust_key(top.get("trust"), source),
    )


def _trust_key(trust: dict | None, source: str) -> str | None:
    key = (trust or {}).get("public_key")
    return str(Path(source).resolve().parent / key) if key else None


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
        platforms=tuple(Platform(p) for p in b["platforms"] or ()),
        python=Python(**(b.get("python") or {})),
        torch=Torch(**torch),
        plugin=Plugin(**b["plugin"]) if b.get("plugin") else None,
        import_module=b["import"],
        availability=b["availability"],
        env=tuple(sorted((b.get("env") or {}).items())),
        run=RunSpec(**{**run, "env": tuple(sorted((run.get("env") or {}).items()))}) if run else RunSpec(),
        detect=Detect(**det) if det else Detect(),
        runs_on=tuple((b.get("ci") or {}).get("runs_on") or ()),
        packages=tuple(b.get("packages") or ()),
        user=b.get("user") or "envbuild",
        compile=Compile(**(b.get("compile") or {})),
        apt=tuple(b.get("apt") or ()),
        host=HostNeeds(**{**b["host"], "arch": tuple(b["host"]["arch"] or ()),
                                   "arch_arm64": tuple(b["host"].get("arch_arm64") or ())}) if b.get("host") else None,
        variant_of=b.get("variant_of"),
        own=tuple((d, Pin(b[d]["version"], b[d].get("torch"), tuple(b[d].get("avoid") or ())))
                  for d in ("transformers", "accelerate") if b.get(d)),
    )


def loads(text: str, source: str = DEFAULT_MATRIX, overrides: Iterable[str] = (), facts: Facts | None = None,
          site: Iterable[tuple[Path_, Any, str]] = ()) -> Matrix:
    """The validated matrix; with `facts` (the metadata cache), every image's pins are also held to its Python and
    torch. `site`: the settings' [matrix] fields (path, value, where), applied before `overrides` (--set)."""
    tree, loc = _parse(text, source)
    overrides, site = list(overrides), list(site)
    if not overrides and not site and (not isinstance(tree, dict) or not tree.keys() & TOP.keys()):
        # Not a matrix at all (a netrc, a config given by mistake): say so, and quote nothing of what it holds.
        got = type_message(tree, "a mapping")[len("expected a mapping, got "):].split(" ", 2)
        what = "a mapping with none of them" if isinstance(tree, dict) else " ".join(got[:2])
        raise MatrixError(loc.problems or [Problem(source, None, "not an envbuild matrix: expected a mapping with 'image', "
                                                   f"'transformers', 'accelerate' and 'backends', got {what} (its contents are not shown)")])
    if overrides or site:
        if not isinstance(tree, dict):
            tree = {}
        apply_site(tree, site, loc)
        apply_overrides(tree, overrides, loc)
    if not isinstance(tree, dict):
        got = " ".join(type_message(tree, "a mapping")[len("expected a mapping, got "):].split(" ", 2)[:2])
        loc.at((), f"the matrix must be a mapping with 'image', 'transformers', 'accelerate' and 'backends', got {got}")
        raise MatrixError(loc.problems)
    matrix = _build(tree, source, loc)
    if matrix is not None and not loc.problems and facts is not None:
        for where, message in fact_problems(matrix, facts):
            loc.at(tuple(where.split(".")), message)
    if loc.problems or matrix is None:
        raise MatrixError(loc.problems)
    return matrix


def load(path: str | Path = DEFAULT_MATRIX, overrides: Iterable[str] = (), *, with_facts: bool = True,
         site: Iterable[tuple[Path_, Any, str]] = ()) -> Matrix:
    """The matrix file, validated; with the metadata cache beside it (facts.path_for) unless `with_facts` is False."""
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        hint = " (pass --matrix FILE, or run from the envbuild checkout)" if str(path) == DEFAULT_MATRIX else ""
        raise MatrixError([Problem(str(path), None, f"no such file{hint}")])
    try:  # a regular file of bounded size, in its folder: never a FIFO, /dev/zero or a link out
        raw = read_project(p, str(path), limit=MAX_MATRIX, within=packaged_within(p))
    except EnvbuildError as exc:
        raise MatrixError([Problem(str(path), None, str(exc).split(": ", 1)[-1])]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise MatrixError([Problem(str(path), line, "not UTF-8 text")]) from None
    return loads(text, str(path), overrides, read_facts(path_for(p)) if with_facts else None, site)

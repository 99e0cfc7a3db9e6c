"""A site's settings, in one place: mirrors, the wheel folder, the CA bundle, netrc, the default registry, base
images. Read from the user's file ($XDG_CONFIG_HOME/envbuild/config.toml), the project's (envbuild.toml beside the
matrix in use), ENVBUILD_* variables and the command's flags; a later one wins (flag > env > project > user), and
every value remembers where it came from (`envbuild config` shows it).

Index mirrors are applied by one function, `mirror_url(url, mirrors)`: the Dockerfile a build runs, the lock's
resolver and an install from URLs all call it; what is recorded (the lock's inputs, the image's content key) keeps
the index's own URL, so a lock made through a mirror is the same lock.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from envbuild.core.errors import InvalidInput
from envbuild.core.output import masked
from envbuild.core.text import shown

PROJECT_FILE = "envbuild.toml"
MAX_FILE = 1 << 20


@dataclass(frozen=True)
class Key:
    kind: str  # "path", "text", "map" (a table of NAME = VALUE) or "fields" (matrix fields, as --set names them)
    env: str
    flag: str
    help: str
    example: str


KEYS: dict[str, Key] = {
    "registry_mirrors": Key("map", "ENVBUILD_REGISTRY_MIRRORS", "--mirror FROM=TO",
                            "pull base images from a mirror: registry -> mirror registry[/path]",
                            '"docker.io" = "mirror.corp:5000"'),
    "index_mirrors": Key("map", "ENVBUILD_INDEX_MIRRORS", "--index-mirror URL=MIRROR",
                         "ask a mirror instead of a package index: index URL -> mirror URL",
                         '"https://download.pytorch.org/whl/cpu" = "https://pypi-mirror.corp/whl/cpu"'),
    "wheelhouse": Key("path", "ENVBUILD_WHEELHOUSE", "--wheelhouse", "a folder of wheels the build may use",
                      'wheelhouse = "/srv/wheels"'),
    "ca_bundle": Key("path", "ENVBUILD_CA_BUNDLE", "--ca-bundle",
                     "the CA bundle for the indexes and registries (a TLS-inspecting proxy's)",
                     'ca_bundle = "/etc/ssl/certs/corp.pem"'),
    "netrc": Key("path", "ENVBUILD_NETRC", "--netrc", "a netrc file with package index credentials (never shown)",
                 'netrc = "~/.netrc"'),
    "registry": Key("text", "ENVBUILD_REGISTRY", "--registry", "where publish pushes and pull pulls",
                    'registry = "registry.corp/ml/envbuild"'),
    "base_images": Key("map", "ENVBUILD_BASE_IMAGES", "--set backends.NAME.base_image=IMAGE",
                       "a backend's base image: backend -> image",
                       'cpu = "registry.corp/library/python:3.12-slim-bookworm"'),
    # No variable: $ENVBUILD_MATRIX names the matrix file. [matrix] holds fields of the whole matrix
    # (image.repository) or of every backend (torch.index_url); [matrix.NAME] one backend's (torch.version).
    "matrix": Key("fields", "", "--set PATH=VALUE",
                  "matrix fields as --set names them: [matrix] for the whole matrix or every backend, "
                  "[matrix.NAME] for one backend",
                  '[matrix.cpu] then torch.version = "2.13.0"'),
}

MAPS = ("map", "fields")  # kinds whose value is a table, layered entry by entry

DEFAULT_ORIGIN = "default"


def user_file(environ: Mapping[str, str] | None = None) -> Path:
    """$XDG_CONFIG_HOME/envbuild/config.toml, else ~/.config/envbuild/config.toml."""
    env = os.environ if environ is None else environ
    root = env.get("XDG_CONFIG_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(root, "envbuild", "config.toml")


def project_file(matrix_path: str | os.PathLike[str] | None) -> Path:
    """envbuild.toml beside the matrix in use (in this folder when the matrix is the one packaged with envbuild)."""
    from envbuild.core import paths

    matrix = Path(matrix_path) if matrix_path else Path(paths.default_matrix())
    try:
        packaged = matrix.resolve() == paths.PACKAGED_MATRIX.resolve()
    except (OSError, RuntimeError):  # a link in a loop: reading the matrix says so
        packaged = False
    if packaged:
        return Path(PROJECT_FILE)
    return matrix.parent / PROJECT_FILE


@dataclass(frozen=True)
class Settings:
    """The settings in effect. `values`: key -> value (a path, a text, a dict for a map; None: not set).
    `origins`: key (or key.ENTRY for a map's entry) -> where it came from, in people's words."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    files: tuple[str, ...] = ()  # the files read, user's first

    def get(self, key: str) -> Any:
        return self.values.get(key, {} if KEYS[key].kind in MAPS else None)

    def origin(self, key: str, entry: str | None = None) -> str:
        return self.origins.get(f"{key}.{entry}" if entry is not None else key, DEFAULT_ORIGIN)

    # --- typed views -------------------------------------------------------------------------------------------

    @property
    def registry_mirrors(self) -> tuple[str, ...]:
        """As --mirror takes them: FROM=TO, the longest FROM first (imageref.mirror takes the first that fits, so
        docker.io/library=... wins over docker.io=... whichever file said which)."""
        return tuple(f"{k}={v}" for k, v in sorted(self.get("registry_mirrors").items(), key=lambda kv: -len(kv[0])))

    @property
    def index_mirrors(self) -> tuple[tuple[str, str], ...]:
        return tuple(self.get("index_mirrors").items())

    @property
    def base_images(self) -> dict[str, str]:
        return dict(self.get("base_images"))

    @property
    def matrix_fields(self) -> tuple[tuple[tuple[str, ...], Any, str], ...]:
        """The matrix overrides: (the field's path under [matrix], its value, where it was said), the user's file
        first; matrix/load.py applies them before --set, each refused at its file and line when it names no field."""
        return tuple((tuple(k.split(".")), v, self.origin("matrix", k)) for k, v in self.get("matrix").items())

    def path(self, key: str) -> Path | None:
        """A path setting, checked now that it is used: a missing file names where the setting came from (exit 2)."""
        value = self.get(key)
        if value is None:
            return None
        p = Path(value)
        want_dir = key == "wheelhouse"
        ok = p.is_dir() if want_dir else p.is_file()
        if not ok:
            what = "a folder" if want_dir else "a regular file"
            raise InvalidInput(f"{key} {shown(str(p))} (from {self.origin(key)}): not {what}"
                               f"{'' if p.exists() else ' (it does not exist)'}")
        return p

    # --- layering ----------------------------------------------------------------------------------------------

    def layered(self, values: dict[str, Any], origins: dict[str, str]) -> Settings:
        """These settings with `values` on top: a map's entries one by one, anything else whole."""
        new_values, new_origins = dict(self.values), dict(self.origins)
        for key, value in values.items():
            if value is None or (KEYS[key].kind in MAPS and not value):
                continue
            if KEYS[key].kind in MAPS:
                merged = dict(new_values.get(key) or {})
                for entry, to in value.items():
                    merged[entry] = to
                    new_origins[f"{key}.{entry}"] = origins.get(f"{key}.{entry}", origins.get(key, DEFAULT_ORIGIN))
                new_values[key] = merged
            else:
                new_values[key] = value
                new_origins[key] = origins.get(key, DEFAULT_ORIGIN)
        return replace(self, values=new_values, origins=new_origins)

    def with_flags(self, **flags: Any) -> Settings:
        """These settings under the command's flags (None or empty: not given). A map flag is a list of
        FROM=TO (as --mirror takes it) or a dict."""
        values, origins = {}, {}
        for key, given in flags.items():
            if given is None or given == () or given == []:
                continue
            spec = KEYS[key]
            flag = spec.flag.split()[0]
            if spec.kind == "map":
                if isinstance(given, Mapping):
                    items = list(given.items())
                elif key == "registry_mirrors":  # --mirror says its own error, as it always has
                    from envbuild.core.imageref import parse_mirror

                    items = [parse_mirror(g) for g in given]
                else:
                    items = [_pair(g, flag, spec) for g in given]
                value = {}
                for k, v in items:
                    k, v = _check(key, k, v, flag)
                    value[k] = v
                    origins[f"{key}.{k}"] = f"{flag} {k}={v}"
                values[key] = value
            else:
                values[key] = _check(key, None, str(given), flag)[1]
                origins[key] = flag
        return self.layered(values, origins)

    # --- what `envbuild config` shows --------------------------------------------------------------------------

    def rows(self, environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """Every setting (each entry of a map), its value and where it came from; a netrc's content never."""
        env = os.environ if environ is None else environ
        rows = []
        for key, spec in KEYS.items():
            value = self.get(key)
            if spec.kind in MAPS:
                for entry, to in value.items():
                    shown_key = entry if spec.kind == "fields" else _toml_key(entry)
                    rows.append({"key": f"{key}.{shown_key}", "value": _text(to), "origin": self.origin(key, entry)})
                if not value:
                    rows.append({"key": key, "value": None, "origin": DEFAULT_ORIGIN + _default_note(key)})
            elif value is not None:
                rows.append({"key": key, "value": str(value), "origin": self.origin(key)})
            else:
                fallback = _fallback(key, env)
                rows.append({"key": key, "value": fallback[0], "origin": fallback[1]})
        return rows


def _default_note(key: str) -> str:
    return {"base_images": " (the matrix's)", "matrix": " (the matrix file's)"}.get(key, "")


def _text(value: Any) -> Any:
    """A matrix field's value as `envbuild config` shows it: TOML's spelling of a bool or a list."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(str(_text(v)) for v in value) + "]"
    return value


def _fallback(key: str, env: Mapping[str, str]) -> tuple[str | None, str]:
    """What applies when a setting is not set: the host's CA bundle variables, the matrix's repository."""
    if key == "ca_bundle":
        from_env = next(((v, env[v]) for v in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT") if env.get(v)), None)
        if from_env:
            return from_env[1], f"${from_env[0]} (the host's)"
        return None, DEFAULT_ORIGIN + " (none: the base image's own CAs)"
    if key == "registry":
        return None, DEFAULT_ORIGIN + " (the matrix's image.repository)"
    return None, DEFAULT_ORIGIN


def _toml_key(entry: str) -> str:
    return entry if re.fullmatch(r"[A-Za-z0-9_-]+", entry) else '"' + entry.replace('"', '\\"') + '"'


def _pair(given: str, flag: str, spec: Key) -> tuple[str, str]:
    k, sep, v = given.partition("=")
    if not sep or not k or not v:
        raise InvalidInput(f"{flag} {masked(given)}: expected {spec.flag.split()[-1]}, e.g. {flag} {_example(spec)}")
    return k, v


def _example(spec: Key) -> str:
    k, _, v = spec.example.partition(" = ")
    return f"{k.strip(chr(34))}={v.strip(chr(34))}"


# --- values ---------------------------------------------------------------------------------------------------

_URL = re.compile(r"https?://[^\s\"'\\$`]+")  # it lands in a Dockerfile's "...": no quote, no expansion
_BACKEND = re.compile(r"[a-z0-9][a-z0-9-]*")


def _check(key: str, entry: str | None, value: Any, where: str) -> tuple[str | None, Any]:
    """The value of `key` (an entry of a map: `entry`), normalised, or InvalidInput naming `where`."""
    spec = KEYS[key]
    if not isinstance(value, str):
        raise InvalidInput(f"{where}: {key}{'.' + masked(entry) if entry else ''} must be a string, e.g. {spec.example}")
    if unsafe := re.search(r"[\x00-\x1f\x7f]", value):
        raise InvalidInput(f"{where}: {key}: a control character ({unsafe.group()!r}) in the value")
    if key == "registry_mirrors":
        from envbuild.core.imageref import parse_mirror

        try:
            src, dst = parse_mirror(f"{entry}={value}")
        except InvalidInput:
            raise InvalidInput(f"{where}: registry_mirrors: {masked(entry or '')} = {masked(value)}: expected a registry "
                               "host (with a '.' or a port, or localhost) and an optional path on each side, e.g. "
                               f"{spec.example}") from None
        return src, dst
    if key == "index_mirrors":
        for side in (entry or "", value):
            if not _URL.fullmatch(side):
                raise InvalidInput(f"{where}: index_mirrors: {masked(side)} is not an http(s) URL, e.g. {spec.example}")
        return normal_url(entry or ""), normal_url(value)
    if key == "base_images":
        from envbuild.core.imageref import InvalidReference, Reference

        if not _BACKEND.fullmatch(entry or ""):
            raise InvalidInput(f"{where}: base_images: {masked(entry or '')} is not a backend name, e.g. {spec.example}")
        try:
            Reference.parse(value, f"base_images.{entry}")
        except InvalidReference as exc:
            raise InvalidInput(f"{where}: {exc}") from None
        return entry, value
    if key == "registry":
        from envbuild.core.imageref import check_repository

        try:
            return None, check_repository(value, "registry")
        except InvalidInput as exc:
            raise InvalidInput(f"{where}: {exc}") from None
    if not value:
        raise InvalidInput(f"{where}: {key} is empty, e.g. {spec.example}")
    return None, value


def _resolve_path(value: str, base: Path | None) -> str:
    p = Path(os.path.expanduser(value))
    if not p.is_absolute() and base is not None:
        p = base / p
    return str(p)


# --- files ----------------------------------------------------------------------------------------------------

_KEY_PART = r'(?:[A-Za-z0-9_-]+|"(?:[^"\\]|\\.)*"|\'[^\']*\')'
_KEY_LINE = re.compile(rf"\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=")
_TABLE_LINE = re.compile(rf"\s*\[\s*({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*\]")


def _parts(dotted: str) -> tuple[str, ...]:
    parts = re.findall(_KEY_PART, dotted)
    return tuple(p[1:-1].replace('\\"', '"') if p[:1] in "\"'" else p for p in parts)


def _lines(text: str) -> dict[tuple[str, ...], int]:
    """Where each key sits (its full dotted path -> line), so that an error can say file:line; TOML parsers
    do not tell. A table's own line too. The first place wins."""
    where: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.split("\n"), 1):
        if m := _TABLE_LINE.match(line):
            table = _parts(m.group(1))
            where.setdefault(table, number)
        elif m := _KEY_LINE.match(line):
            where.setdefault(table + _parts(m.group(1)), number)
    return where


# TOML that would take tomllib minutes (a key of thousands of dots is quadratic) or its stack (deep nesting):
# refused before parsing. No settings file nests past a map's entry.
_TOML_NEXT = re.compile(r"""[\[\]{}=,\n.#"']""")
_TOML_BASIC = re.compile(r'(?:[^"\\\n]+|\\.)*')  # the rest of a "string" (never backtracks: it cannot fail)
_TOML_MULTI = re.compile(r'(?:[^"\\]+|\\.|"(?!""))*', re.S)
MAX_TOML_DEPTH = 16  # brackets and braces open at once
MAX_TOML_DOTS = 16  # dots in one key


def _toml_shape(text: str) -> str | None:
    """Why `text` is not TOML a settings file holds (nested or dotted past reason), with its line; None when it
    is not. One pass, linear, over its strings, comments and punctuation; an unclosed string ends it (tomllib
    stops there too)."""
    depth = dots = 0
    line, i = 1, 0
    while (m := _TOML_NEXT.search(text, i)) is not None:
        c, i = m.group(), m.end()
        if c == "#":
            i = text.find("\n", i)
            if i < 0:
                break
        elif c in "\"'":
            multi = text.startswith(c * 2, i)
            if c == "'":
                end = text.find("\'\'\'" if multi else "\'", i + 2 if multi else i)
                if end < 0 or (not multi and "\n" in text[i:end]):
                    break
            else:
                end = (_TOML_MULTI if multi else _TOML_BASIC).match(text, i + 2 if multi else i).end()
                if not text.startswith('"' * (3 if multi else 1), end):
                    break
            line += text.count("\n", i, end)
            i = end + (3 if multi else 1)
        elif c in "[{":
            depth += 1
            if depth > MAX_TOML_DEPTH:
                return f"{line}: nested more than {MAX_TOML_DEPTH} deep"
        elif c in "]}":
            depth -= 1
        if c == ".":
            dots += 1
            if dots > MAX_TOML_DOTS:
                return f"{line}: a key of more than {MAX_TOML_DOTS} dotted parts"
        elif c not in "\"'#":
            dots = 0
        if c == "\n":
            line += 1
    return None


def read_file(path: Path, label: str, project: bool = False) -> tuple[dict[str, Any], dict[str, str]]:
    """One settings file: its values and where each sits ("path:line (key)"). A missing file is no settings; an
    unknown key, a bad value or broken TOML is InvalidInput naming the file and line. `project`: a file a pull
    request may bring (a link out of its folder is refused)."""
    from envbuild.core.files import read_project, read_user

    if not path.exists() and not path.is_symlink():
        return {}, {}
    if sys.version_info >= (3, 11):  # imported here: most commands find no file, and pay nothing
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    data = (read_project if project else read_user)(path, f"{label} {path}", InvalidInput, limit=MAX_FILE)
    try:
        text = data.decode("utf-8")
        if (why := _toml_shape(text)) is not None:
            raise InvalidInput(f"{shown(str(path))}:{why}: not a settings file (envbuild.toml keys are a name or "
                               "a table's entry)")
        doc = tomllib.loads(text)
    except UnicodeDecodeError:
        raise InvalidInput(f"{shown(str(path))}: not UTF-8 text") from None
    except RecursionError:  # a shape _toml_shape did not foresee: still bad input
        raise InvalidInput(f"{shown(str(path))}: nested too deeply to be a settings file") from None
    except tomllib.TOMLDecodeError as exc:
        said = str(exc)
        m = re.search(r"\(at line (\d+), column (\d+)\)", said)
        where = f"{path}:{m.group(1)}" if m else str(path)
        raise InvalidInput(f"{shown(where)}: not valid TOML: {shown(re.sub(r' [(]at line.*', '', said))}") from None
    lines = _lines(text)

    def at(*key: str) -> str:
        for n in range(len(key), 0, -1):
            if key[:n] in lines:
                return f"{path}:{lines[key[:n]]}"
        return str(path)

    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, value in doc.items():
        if key not in KEYS:
            import difflib

            close = difflib.get_close_matches(key, KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise InvalidInput(f"{masked(at(key))}: unknown key {masked(key)!r}{hint}; known keys: {', '.join(KEYS)}")
        spec = KEYS[key]
        if spec.kind == "fields":
            if not isinstance(value, dict):
                raise InvalidInput(f"{shown(at(key))}: {key} must be a table, e.g. {spec.example}")
            fields: dict[str, Any] = {}
            for parts, leaf in _leaves(value, ()):
                dotted = ".".join(parts)
                fields[dotted] = _field(leaf, f"{at(key, *parts)}: {key}.{shown(dotted)}")
                origins[f"{key}.{dotted}"] = f"{at(key, *parts)} ({key}.{dotted})"
            values[key] = fields
        elif spec.kind == "map":
            if not isinstance(value, dict):
                raise InvalidInput(f"{shown(at(key))}: {key} must be a table, e.g. [{key}] then {spec.example}")
            entries = {}
            for entry, to in value.items():
                if isinstance(to, dict):
                    raise InvalidInput(f"{masked(at(key, entry))}: {key}.{masked(entry)}: expected a string, e.g. "
                                       f"{spec.example} (a key with dots or '/' goes in quotes)")
                k, v = _check(key, entry, to, at(key, entry))
                entries[k] = v
                origins[f"{key}.{k}"] = f"{at(key, entry)} ({key}.{_toml_key(entry)})"
            values[key] = entries
        else:
            _, checked = _check(key, None, value, at(key))
            values[key] = _resolve_path(checked, path.parent) if spec.kind == "path" else checked
            origins[key] = f"{at(key)} ({key})"
    return values, origins


def _leaves(table: dict[str, Any], above: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], Any]]:
    """A [matrix] table's fields as paths: `[matrix.cpu]` then `torch.version = "X"` is (cpu, torch, version)."""
    for name, value in table.items():
        if isinstance(value, dict):
            yield from _leaves(value, above + (name,))
        else:
            yield above + (name,), value


def _field(value: Any, where: str) -> Any:
    """A matrix field's value from a settings file: a string, a bool, a number (as text: --set reads 2.13 as the
    version "2.13") or a list of those; the matrix's own checks judge it where it is applied."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        if unsafe := re.search(r"[\x00-\x1f\x7f]", value):
            raise InvalidInput(f"{shown(where)}: a control character ({unsafe.group()!r}) in the value")
        return value
    if isinstance(value, list):
        return [_field(v, where) for v in value]
    raise InvalidInput(f"{shown(where)}: expected a string, a number, true/false or a list, e.g. {KEYS['matrix'].example}")


def from_environment(environ: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """ENVBUILD_* variables: a path or text as is; a map as FROM=TO items separated by spaces or commas."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, spec in KEYS.items():
        raw = environ.get(spec.env) if spec.env else None
        if raw is None or not raw.strip():
            continue
        if spec.kind == "map":
            entries = {}
            for item in re.split(r"[\s,]+", raw.strip()):
                k, sep, v = item.partition("=")
                if not sep or not k or not v:
                    raise InvalidInput(f"${spec.env}: {masked(item)}: expected FROM=TO items separated by spaces or "
                                       f"commas, e.g. {spec.env}={_example(spec)}")
                k, v = _check(key, k, v, f"${spec.env}")
                entries[k] = v
                origins[f"{key}.{k}"] = f"${spec.env}"
            values[key] = entries
        else:
            _, checked = _check(key, None, raw, f"${spec.env}")
            values[key] = _resolve_path(checked, None) if spec.kind == "path" else checked
            origins[key] = f"${spec.env}"
    return values, origins


def load(matrix_path: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings of the user's file, the project's and the environment (flags go on with `with_flags`)."""
    env = os.environ if environ is None else environ
    settings = Settings()
    read = []
    for label, path in (("the user's settings", user_file(env)), ("the project's settings", project_file(matrix_path))):
        values, origins = read_file(path, label, project=label == "the project's settings")
        if values or path.exists():
            read.append(str(path))
        settings = settings.layered(values, origins)
    values, origins = from_environment(env)
    settings = settings.layered(values, origins)
    return replace(settings, files=tuple(read))


# --- index mirrors --------------------------------------------------------------------------------------------


def normal_url(url: str) -> str:
    """An index URL as mirrors are matched: without a trailing '/'."""
    return url.rstrip("/")


def _mirrors(mirrors: Settings | Mapping[str, str] | Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    if isinstance(mirrors, Settings):
        pairs = list(mirrors.index_mirrors)
    elif isinstance(mirrors, Mapping):
        pairs = list(mirrors.items())
    else:
        pairs = list(mirrors)
    # the longest index URL first: a mirror of .../whl/cpu beats one of the whole host
    return sorted(((normal_url(a), normal_url(b)) for a, b in pairs), key=lambda p: -len(p[0]))


def mirror_url(url: str, mirrors: Settings | Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """`url` (an index, or a file under it: .../whl/cpu/torch-2.9.0+cpu-...whl) as fetched through the mirror of the
    longest index URL that holds it, at a path boundary; `url` itself when no mirror holds it. The one place an
    index mirror is applied: the build's Dockerfile, the resolver's indexes and an install from a lock's URLs."""
    for index, to in _mirrors(mirrors):
        if url == index or url.startswith(index + "/"):
            return to + url[len(index):]
    return url


def original_url(url: str, mirrors: Settings | Mapping[str, str] | Iterable[tuple[str, str]]) -> str:
    """The inverse of mirror_url: a URL fetched through a mirror as the index's own (what a lock records)."""
    for index, to in sorted(_mirrors(mirrors), key=lambda p: -len(p[1])):
        if url == to or url.startswith(to + "/"):
            return index + url[len(to):]
    return url


def mirror_setting(index: str) -> str:
    """How to set a mirror for `index`, in the three places one can: for a message's way out."""
    index = normal_url(index)
    return (f'index_mirrors."{index}" = "MIRROR-URL" in {PROJECT_FILE} (or {user_file()}), '
            f"${KEYS['index_mirrors'].env}=\"{index}=MIRROR-URL\", or --index-mirror {index}=MIRROR-URL")


# --- `envbuild config set` / `unset` ---------------------------------------------------------------------------


def config_set(key: str, value: str, backend: str | None = None) -> str:
    """The command that writes a setting: a message's way out, followed once, holds on this machine."""
    import shlex

    return f"envbuild config set {key} {shlex.quote(value)}" + (f" --backend {backend}" if backend else "")


@dataclass(frozen=True)
class Place:
    """Where `envbuild config set KEY` writes: the TOML table, the key in it (TOML's spelling), the setting."""

    table: tuple[str, ...]
    key: str
    setting: str  # the settings key: "wheelhouse", "index_mirrors", "matrix"
    entry: str | None  # a map's entry, or a matrix field's dotted path under [matrix]


def place(key: str, backend: str | None = None) -> Place:
    """KEY as `config set` takes it: a setting (wheelhouse), a map's entry (index_mirrors.URL), or a matrix field as
    --set names it (torch.version with --backend NAME, image.repository, backends.NAME.FIELD); InvalidInput (exit 2)
    for a key that is neither."""
    head, dot, rest = key.partition(".")
    if backend is not None and not _BACKEND.fullmatch(backend):
        raise InvalidInput(f"--backend {shown(backend)}: not a backend name")
    if head in KEYS and KEYS[head].kind != "fields":
        if backend:
            raise InvalidInput(f"{shown(key)} is a site setting, not a backend's: leave out --backend")
        if KEYS[head].kind == "map":
            if not rest:
                raise InvalidInput(f"{head} is a table: name its entry, e.g. {head}.{_example(KEYS[head]).partition('=')[0]}")
            return Place((head,), _toml_key(rest), head, rest)
        if dot:
            raise InvalidInput(f"{shown(key)}: {head} takes no entry")
        return Place((), head, head, None)
    parts = tuple(rest.split(".")) if head == "matrix" else tuple(key.split("."))
    if parts[:1] == ("backends",) and len(parts) > 2:
        if backend and backend != parts[1]:
            raise InvalidInput(f"{shown(key)} names backend {shown(parts[1])}, --backend {shown(backend)}")
        backend, parts = parts[1], parts[2:]
    if not parts or not all(re.fullmatch(r"[A-Za-z0-9_-]+", p) for p in parts):
        raise InvalidInput(f"{shown(key)}: expected a setting ({', '.join(k for k in KEYS if k != 'matrix')}) or a "
                           "matrix field as --set names it, e.g. torch.version --backend cpu")
    if len(parts) == 1 and not backend:
        import difflib

        close = difflib.get_close_matches(parts[0], [k for k in KEYS if k != "matrix"], n=1)
        if close:
            raise InvalidInput(f"unknown setting {shown(key)!r} (did you mean {close[0]!r}?)")
    table = ("matrix", backend) if backend else ("matrix",)
    dotted = ".".join(parts)
    return Place(table, dotted, "matrix", f"{backend}.{dotted}" if backend else dotted)


def toml_value(found: Place, value: str, where: str) -> str:
    """`value` checked as the setting takes it, in TOML's spelling (a matrix field's true/false as a bool)."""
    if found.setting == "matrix":
        if value in ("true", "false"):
            return value
        _field(value, where)
    else:
        if KEYS[found.setting].kind == "path":
            value = str(Path(os.path.expanduser(value)).absolute())
        _check(found.setting, found.entry, value, where)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def edited(text: str, found: Place, value: str | None) -> str:
    """The file's text with KEY set to `value` (TOML) or, with None, removed; every other line kept as it is."""
    lines = text.split("\n") if text else []
    table: tuple[str, ...] = ()
    start = end = None  # the wanted table's lines: [start, end)
    hit = None
    for number, line in enumerate(lines):
        if m := _TABLE_LINE.match(line):
            if table == found.table and start is not None and end is None:
                end = number
            table = _parts(m.group(1))
            if table == found.table:
                start, end = number + 1, None
            continue
        if number == 0 and not found.table:
            start = 0
        if table == found.table and (m := _KEY_LINE.match(line)) and _parts(m.group(1)) == _parts(found.key):
            hit = number
    if not found.table and start is None:
        start = 0
    if start is not None and end is None:
        end = next((n for n in range(start, len(lines)) if _TABLE_LINE.match(lines[n])), len(lines))
    new = f"{found.key} = {value}"
    if hit is not None:
        if value is None:
            del lines[hit]
        else:
            lines[hit] = new
    elif value is None:
        return text
    elif start is not None:
        at = end
        while at > start and not lines[at - 1].strip():
            at -= 1
        lines.insert(at, new)
    else:
        while lines and not lines[-1].strip():
            lines.pop()
        header = "[" + ".".join(_toml_key(p) for p in found.table) + "]"
        lines += ([""] if lines else []) + [header, new]
    out = "\n".join(lines)
    return out if out.endswith("\n") or not out else out + "\n"

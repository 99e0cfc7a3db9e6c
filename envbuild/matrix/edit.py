"""Edit matrix.yaml in place: only the changed scalars differ, every other byte stays.

ruamel.yaml finds where each value sits (line and column); the value is then replaced in the text itself, so
comments, key order, quoting and layout stay exactly as written (a re-dump would reflow them).
"""

from __future__ import annotations

import io
import re
from typing import Any, Mapping

import yaml
from ruamel.yaml import YAML

from envbuild.core.errors import Problem, MatrixError

_PLAIN_END = re.compile(r"\s+#|\s*$")


def load(text: str) -> Any:
    return YAML(typ="rt").load(io.StringIO(text))


def holds(doc: Any, dotted: str) -> bool:
    """Whether the file itself sets this field (a variant's inherited settings are not in its text)."""
    node = doc
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def _locate(doc: Any, path: list[str], source: str) -> tuple[Any, list[str]]:
    """The deepest mapping on the path that the file has, and the keys under it that it lacks (at least the
    last). Only inside a backend may mappings be missing (a variant sets just what differs from its base)."""
    node = doc
    for i, part in enumerate(path[:-1]):
        if not isinstance(node, dict) or (part not in node and i < 2):
            raise MatrixError([Problem(source, None, f"{'.'.join(path[: i + 1])}: not in the matrix")])
        if part not in node:
            return node, path[i:]
        node = node[part]
    if not isinstance(node, dict):
        raise MatrixError([Problem(source, None, f"{'.'.join(path[:-1])}: not a mapping")])
    return node, path[-1:]


def _block_end(lines: list[str], line: int, indent: int) -> int:
    """The line after the block that starts at `line` (a key at `indent` and whatever is nested under it)."""
    end = line + 1
    while end < len(lines):
        stripped = lines[end].lstrip(" ")
        if stripped.strip() and not stripped.startswith("#") and len(lines[end]) - len(stripped) <= indent:
            break
        end += 1
    while end > line + 1 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1  # blank lines and the comments above the next key stay after the insertion
    return end


def _scalar_end(line: str, col: int) -> int:
    """Where the scalar starting at `col` ends: its closing quote, or before a comment or the line's end."""
    quote = line[col] if col < len(line) else ""
    if quote in "\"'":
        end = line.index(quote, col + 1)
        return end + 1
    m = _PLAIN_END.search(line, col)
    return m.start() if m else len(line)


def apply(text: str, changes: Mapping[str, str], source: str = "matrix.yaml") -> str:
    """`text` with each dotted field set to its new value. A field missing beside its siblings (e.g.
    transformers.torch) is added after the last of them, quoted, at their indentation; mappings missing on its
    way (a variant's `torch:`) are added with it."""
    doc = load(text)
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # (line, start col, end col, new text); end -1: insert lines
    for dotted, value in changes.items():
        node, missing = _locate(doc, dotted.split("."), source)
        if len(missing) == 1 and missing[0] in node:
            line, col = node.lc.value(missing[0])
            old = lines[line].rstrip("\n")
            end = _scalar_end(old, col)
            quote = old[col] if old[col:col + 1] in ("\"", "'") else ""
            edits.append((line, col, end, f"{quote}{value}{quote}"))
            continue
        line, indent = node.lc.key(list(node)[-1])
        added = [f"{' ' * (indent + 2 * i)}{key}:\n" for i, key in enumerate(missing[:-1])]
        added.append(f"{' ' * (indent + 2 * (len(missing) - 1))}{missing[-1]}: \"{value}\"\n")
        edits.append((_block_end(lines, line, indent), indent, -1, "".join(added)))
    # From the bottom up, so earlier positions hold. On one line, its value is replaced before lines go above it,
    # and of the lines inserted at one place the deeper go last, so they end up on top (inside the block).
    for line, col, end, new in sorted(edits, key=lambda e: (e[0], e[2] != -1, -e[1]), reverse=True):
        if end == -1:
            if line == len(lines) and lines and not lines[-1].endswith("\n"):  # added lines start a line of their own
                lines[-1] += "\n"
            lines.insert(line, new)
        else:
            old = lines[line]
            lines[line] = old[:col] + new + old[end:]
    out = "".join(lines)
    _verify(text, out, changes, source)
    return out


def _verify(old_text: str, new_text: str, changes: Mapping[str, str], source: str) -> None:
    """The edited text must hold exactly the old document with each change in place, and nothing else: a value
    that would close its quotes, start a comment or add keys in the YAML is refused, and nothing is written."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        before, after = yaml.load(old_text, Loader=loader), yaml.load(new_text, Loader=loader)
    except yaml.YAMLError:
        after = None
        before = {}
    problems = []
    for dotted in changes:
        parts = dotted.split(".")
        for tree in (before, after):
            node = tree
            for part in parts[:-1]:
                node = node.get(part) if isinstance(node, dict) else None
            got = node.pop(parts[-1], None) if isinstance(node, dict) else None
            if tree is after and (got is None or str(got) != changes[dotted]):
                problems.append(Problem(source, None, f"{dotted}: {changes[dotted]!r} would not be written as that one "
                                                      "value (it would change the YAML around it): refused, nothing written"))
    if not problems and _pruned(before) != _pruned(after):
        problems.append(Problem(source, None, f"{', '.join(changes)}: the edit would change other fields of the matrix: "
                                              "refused, nothing written"))
    if problems:
        raise MatrixError(problems)


def _pruned(tree: Any) -> Any:
    """The tree without the mappings an edit may have added empty on its way (a variant's `torch:`)."""
    if isinstance(tree, dict):
        pruned = {k: _pruned(v) for k, v in tree.items()}
        return {k: v for k, v in pruned.items() if v != {}}
    return tree

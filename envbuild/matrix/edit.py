"""Edit matrix.yaml in place: only the changed scalars differ, every other byte stays.

ruamel.yaml finds where each value sits (line and column); the value is then replaced in the text itself, so
comments, key order, quoting and layout stay exactly as written (a re-dump would reflow them).
"""

from __future__ import annotations

import io
import re
from typing import Any, Mapping

from ..errors import Problem, MatrixError

_PLAIN_END = re.compile(r"\s+#|\s*$")


def _locate(doc: Any, path: list[str], source: str) -> tuple[Any, str]:
    node = doc
    for i, part in enumerate(path[:-1]):
        if not hasattr(node, "lc") or part not in node:
            raise MatrixError([Problem(source, None, f"{'.'.join(path[: i + 1])}: not in the matrix")])
        node = node[part]
    return node, path[-1]


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
    transformers.torch) is added after the last of them, quoted, at their indentation."""
    from ruamel.yaml import YAML

    yaml = YAML(typ="rt")
    doc = yaml.load(io.StringIO(text))
    lines = text.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # (line, start col, end col, new text); end -1: insert a line
    for dotted, value in changes.items():
        node, key = _locate(doc, dotted.split("."), source)
        if key in node:
            line, col = node.lc.value(key)
            old = lines[line].rstrip("\n")
            end = _scalar_end(old, col)
            quote = old[col] if old[col:col + 1] in ("\"", "'") else ""
            edits.append((line, col, end, f"{quote}{value}{quote}"))
        else:
            last = list(node)[-1]
            line, indent = node.lc.key(last)
            edits.append((line + 1, indent, -1, f"{' ' * indent}{key}: \"{value}\"\n"))
    for line, col, end, new in sorted(edits, reverse=True):
        if end == -1:
            lines.insert(line, new)
        else:
            old = lines[line]
            lines[line] = old[:col] + new + old[end:]
    return "".join(lines)

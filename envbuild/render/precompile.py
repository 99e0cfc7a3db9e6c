"""Write render/precompiled.py, the Dockerfile template compiled ahead of time (`--check`: exit 1 when stale).

Run after editing templates/Dockerfile.j2: `python -m envbuild.render.precompile`. A stale file is never used (its
key no longer matches), only slower; the unit tests fail until it is refreshed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from envbuild.core.files import write_all
from envbuild.render import precompiled_text

TARGET = Path(__file__).parent / "precompiled.py"


def main(argv: list[str]) -> int:
    text = precompiled_text()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if "--check" in argv:
        if current != text:
            print(f"{TARGET} is stale: run `python -m envbuild.render.precompile`", file=sys.stderr)
            return 1
        print(f"{TARGET}: up to date")
        return 0
    if current != text:
        write_all({TARGET: text})
    print(f"{'wrote' if current != text else 'unchanged'} {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

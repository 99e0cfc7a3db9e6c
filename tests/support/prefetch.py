"""Make the test bed's slow, cached inputs in the background while the rest of the set-up and the suite run
(scripts/test starts it): the Debian base, the arm64 one (debootstrap's second stage under QEMU, about 6 minutes on
one core) and PyPI's aarch64 torch wheel. The tests ask testbed for the same files: each waits for the one being
made (a file lock) and makes it itself, reporting any failure, when this did not.

    python tests/support/prefetch.py   (stdlib only: it runs before envbuild and the test tools are installed)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import testbed  # noqa: E402


def main() -> int:
    failed = 0
    for name, make in (("the Debian base", testbed.debootstrap_base), ("the arm64 base (under QEMU)", testbed.arm64_base),
                       ("the aarch64 torch wheel", testbed.aarch64_torch_wheelhouse)):
        start = time.monotonic()
        try:
            make()
        except Exception as exc:  # the test that needs it makes it again and says why it cannot
            failed += 1
            print(f"prefetch: {name}: not made ({exc}); the tests will try again", flush=True)
            continue
        print(f"prefetch: {name}: ready in {time.monotonic() - start:.0f} s", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

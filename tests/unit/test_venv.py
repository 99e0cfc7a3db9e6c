"""envbuild/workspace/venv.py without a real install: a long pip step says it is still going
(tests/native/test_env.py makes real environments)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from envbuild.core import heartbeat
from envbuild.workspace import venv


def test_a_long_install_says_it_is_still_going_with_pip_s_latest_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(heartbeat, "PERIOD", 0.01)
    monkeypatch.setattr(heartbeat, "QUIET", 0.0)
    heard = tmp_path / "heard"
    child = ("import os, time\nprint('Downloading torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl (915.3 MB)', flush=True)\n"
             f"for _ in range(3000):\n    if os.path.exists({str(heard)!r}): break\n    time.sleep(0.01)\n")
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if "last: Downloading" in line:
            heard.touch()

    venv._run([sys.executable, "-c", child], echo, False, "installing torch==2.13.0")
    assert heard.exists()
    assert lines[0].startswith("[env] installing torch==2.13.0: ")
    assert re.fullmatch(r"\[env\] still installing torch==2\.13\.0: \d+s; last: Downloading "
                        r"torch-2\.13\.0-cp312-cp312-manylinux_2_28_x86_64\.whl \(915\.3 MB\)", lines[-1]), lines

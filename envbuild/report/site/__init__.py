"""`envbuild site`: the matrix at a glance, as a static site (HTML, CSS, SVG charts; no server).

Inputs: the matrix, a manifest and `smoke --json` reports of the current run, and a history folder of earlier
nightly runs: one folder per run named by its UTC date (YYYY-MM-DD or YYYY-MM-DDTHHMMSSZ), holding that run's
envbuild-manifest.json and/or smoke reports. The site carries its own history/ folder in that format, so the next
run can start from the published one.
"""

from __future__ import annotations

import html
import json
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime
from hashlib import sha256
from pathlib import Path
from typing import Any, Callable

import jinja2

from envbuild.report import report
from envbuild.core.errors import EnvbuildError, InvalidInput
from envbuild.core.files import read_json
from envbuild.matrix import Backend, Matrix, not_containerizable_message
from envbuild.ship import manifest as manifests
from envbuild.core.text import shown
from envbuild.workspace.run import RunOptions, invocation
from envbuild.report.site import charts

HERE = Path(__file__).parent
MARKER = ".envbuild-site"  # in every site written: only such a folder (or an empty one) is replaced
MARKER_TEXT = "written by envbuild site; replaced whole by the next one\n"


def _ours(folder: Path) -> bool:
    """A site this command wrote: its marker is a regular file (not a link, not a folder) holding what it writes."""
    marker = folder / MARKER
    try:
        return marker.is_file() and not marker.is_symlink() and marker.stat().st_size < 4096 \
            and marker.read_text(encoding="utf-8") == MARKER_TEXT
    except (OSError, UnicodeDecodeError):
        return False
RUN_NAME = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:T(\d{2})(\d{2})(\d{2})Z)?\Z")
PASS, FAIL, NOT_RUN, IMPOSSIBLE, NONE = "pass", "fail", "not run", "impossible", "n/a"
SYMBOL = {PASS: "\u2713", FAIL: "\u2717", NOT_RUN: "\u25cb", IMPOSSIBLE: "\u2298", NONE: "\u2014"}
WORD = {PASS: "pass", FAIL: "FAIL", NOT_RUN: "not run", IMPOSSIBLE: "impossible here", NONE: "not a platform"}

_env = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(HERE)),
    undefined=jinja2.StrictUndefined,
    autoescape=True,  # every value from a manifest, a report or the matrix is text, never markup
    trim_blocks=True,
    lstrip_blocks=True,
)


class SiteError(EnvbuildError):
    pass


# --- inputs ---------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One nightly run: its date, the manifest and the smoke results it had."""

    date: str  # UTC, ISO 8601 (2026-12-01T03:23:00Z)
    manifest: dict[str, Any] | None = None
    smoke: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    inherited: bool = False  # the manifest is an earlier run's: its images, not its smoke verdicts


def _basic(date: str) -> str:
    d = datetime.strptime(date, "%Y-%m-%dT%H:%M:%SZ")
    return d.strftime("%Y-%m-%dT%H%M%SZ")


def run_date(name: str) -> str | None:
    """A history folder's name -> its date in extended ISO 8601, or None when the name is not a date."""
    m = RUN_NAME.match(name)
    if not m:
        return None
    day, hh, mm, ss = m.groups()
    try:
        datetime.strptime(f"{day}T{hh or '00'}:{mm or '00'}:{ss or '00'}", "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return f"{day}T{hh or '00'}:{mm or '00'}:{ss or '00'}Z"


def load_smoke(paths: list[Path] | tuple[Path, ...]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """`smoke --json` reports from files, or folders searched for *.json (as `envbuild summary` reads them)."""
    results: dict[str, dict[str, Any]] = {}
    files: list[str] = []
    for path in paths:
        for f in sorted(path.rglob("*.json")) if path.is_dir() else [path]:
            docs = report.smoke_docs(f, read_json(f, shown(str(f)), InvalidInput), strict=not path.is_dir())
            for d in docs:
                results[d["backend"]] = d
            if docs:
                files.append(str(f))
    return results, files


def load_run(folder: Path, date: str) -> Run:
    """A history folder: its manifest (an object with "schema" and "images") and its smoke reports."""
    run = Run(date)
    for f in sorted(folder.rglob("*.json")):
        doc = read_json(f, shown(str(f)), InvalidInput)
        if isinstance(doc, dict) and "images" in doc and "schema" in doc:
            if run.manifest is not None:
                raise InvalidInput(f"{shown(str(f))}: a second manifest in the history run {folder.name} (one per run)")
            run.manifest = manifests.load(f, must_exist=True)
        else:
            docs = report.smoke_docs(f, doc, strict=False)
            run.smoke.update({d["backend"]: d for d in docs})
            if not docs:
                continue
        run.sources.append(str(f))
    return run


def load_history(folder: Path) -> list[Run]:
    """Every run folder in `folder`, oldest first; files beside them (history/index.json) are skipped."""
    runs = []
    for child in sorted(folder.iterdir()):
        if not child.is_dir():
            continue
        date = run_date(child.name)
        if date is None:
            raise InvalidInput(f"--history {folder}: {shown(child.name)!r} is not a run folder: name each run's folder by "
                               "its UTC date, YYYY-MM-DD or YYYY-MM-DDTHHMMSSZ (e.g. 2026-12-01T032300Z)")
        runs.append(load_run(child, date))
    return sorted(runs, key=lambda r: r.date)


# --- one backend in one run -----------------------------------------------------------------------------


def _number(value: Any) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _text(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def state(m: Matrix, name: str, run: Run | None) -> dict[str, Any]:
    """What one run says of one backend: the smoke verdict and checks, the device seen, versions, image."""
    b = _backend(m, name)
    entry = ((run.manifest or {}).get("images") or {}).get(name) if run else None
    entry = entry if isinstance(entry, dict) else {}
    smoke = run.smoke.get(name) if run else None
    summary = entry.get("smoke") if isinstance(entry.get("smoke"), dict) and not (run and run.inherited) else None
    s: dict[str, Any] = {"backend": name, "date": run.date if run else None, "result": NOT_RUN, "checks": [],
                         "seconds": None, "device_name": None, "error": None, "smoke_date": None,
                         "platform": _text(entry.get("platform")), "size": _number(entry.get("size")),
                         "digest": _text(entry.get("digest")), "repository": _text(entry.get("repository")),
                         "tags": [str(t) for t in entry.get("tags") or []], "signature": signature(entry),
                         "requires": entry.get("requires") if isinstance(entry.get("requires"), dict) else None,
                         "versions": {"torch": None, "plugin": None, "transformers": None}, "versions_from": None,
                         "known": bool(entry or smoke)}
    if b is not None:
        s["versions"] = {"torch": b.torch.version, "transformers": m.transformers,
                         "plugin": f"{b.plugin.package} {b.plugin.version}" if b.plugin else None}
        s["versions_from"] = "matrix.yaml (pins)"
    if b is not None and not b.containerizable:
        s["result"] = IMPOSSIBLE
        s["error"] = not_containerizable_message(b)
        s["platform"] = b.platforms[0] if b.platforms else None
        s["size_text"] = None
        return s
    probe = smoke.get("probe") if smoke and isinstance(smoke.get("probe"), dict) else {}
    if smoke:
        s["result"] = PASS if smoke["ok"] else FAIL
        s["checks"] = [{"name": str(c["name"]), "ok": c["ok"], "message": str(c.get("message", ""))} for c in smoke["checks"]]
        s["seconds"] = _number(smoke.get("seconds"))
        s["error"] = smoke.get("error")
        s["smoke_date"] = smoke.get("date")
        s["platform"] = _text(smoke.get("platform")) or s["platform"]
    elif summary:
        s["result"] = PASS if summary.get("ok") else FAIL
        s["checks"] = [{"name": str(c), "ok": False, "message": "failed (from the manifest)"} for c in summary.get("failed_checks") or []]
        s["seconds"] = _number(summary.get("seconds"))
        s["error"] = summary.get("error")
        s["smoke_date"] = summary.get("date")
    info = probe.get("device_info") if isinstance(probe.get("device_info"), dict) else {}
    if info.get("name"):
        count = info.get("count")
        s["device_name"] = f"{count} \u00d7 {info['name']}" if isinstance(count, int) and count > 1 else str(info["name"])
    pv = probe.get("versions") if isinstance(probe.get("versions"), dict) else {}
    ev = entry.get("versions") if isinstance(entry.get("versions"), dict) else {}
    plugin = ev.get("plugin") if isinstance(ev.get("plugin"), dict) else None
    if pv:
        s["versions"] = {"torch": _text(pv.get("torch")), "plugin": _text(pv.get("plugin")), "transformers": _text(pv.get("transformers"))}
        s["versions_from"] = "the probe"
        package = (plugin or {}).get("package") or (b.plugin.package if b is not None and b.plugin else None)
        if package and s["versions"]["plugin"]:  # the probe gives the plugin's version only
            s["versions"]["plugin"] = f"{package} {s['versions']['plugin']}"
    elif ev:
        s["versions"] = {"torch": _text(ev.get("torch")), "transformers": _text(ev.get("transformers")),
                         "plugin": f"{plugin.get('package')} {plugin.get('version')}" if plugin else None}
        s["versions_from"] = "the manifest"
    s["size_text"] = human_size(s["size"])
    if not s["platform"] and b is not None and b.platforms:
        s["platform"] = b.platforms[0]  # a report that names none: the backend's first platform
    return s


def signature(entry: dict[str, Any]) -> str | None:
    """The signature state a manifest entry records (a word, or an object with verified/state), else None."""
    signed = entry.get("signed")  # what publish records when it signs (trust.sign.Signed.to_json)
    if isinstance(signed, dict) and signed.get("signatures"):
        key = _text(str(signed.get("key") or ""))[:16]
        n = len(signed.get("attestations") or [])
        return f"signed (key {key}…, {len(signed['signatures'])} digests, {n} attested)" if key else "signed"
    sig = entry.get("signature")
    if sig is None:
        return None
    if isinstance(sig, dict):
        if isinstance(sig.get("verified"), bool):
            return "verified" if sig["verified"] else "NOT verified"
        return _text(sig.get("state") or sig.get("status")) or "recorded"
    return str(sig)


def _backend(m: Matrix, name: str) -> Backend | None:
    return next((b for b in m.backends if b.name == name), None)


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[dict[str, str]]:
    """What changed between two runs of a backend: result, versions, size, digest, checks that flipped."""
    if before is None or not before["known"] or not after["known"]:
        return []
    out = []

    def add(what: str, a: Any, b: Any) -> None:
        if a != b:
            out.append({"what": what, "before": "-" if a is None else str(a), "after": "-" if b is None else str(b)})

    add("result", before["result"], after["result"])
    for key in ("torch", "plugin", "transformers"):
        add(key, before["versions"].get(key), after["versions"].get(key))
    if before["device_name"] and after["device_name"]:
        add("device", before["device_name"], after["device_name"])
    add("image size", human_size(before["size"]), human_size(after["size"]))
    add("digest", short_digest(before["digest"]), short_digest(after["digest"]))
    old = {c["name"]: c["ok"] for c in before["checks"]}
    for c in after["checks"]:
        if c["name"] in old and old[c["name"]] != c["ok"]:
            add(f"check {c['name']}", WORD[PASS] if old[c["name"]] else WORD[FAIL], WORD[PASS] if c["ok"] else WORD[FAIL])
    return out


def _changed_words(items: list[dict[str, str]]) -> str:
    """The grid's short note: versions and the verdict with their values, the rest by name."""
    words = [f"{c['what']} {c['before']} → {c['after']}" if c["what"] in ("result", "torch", "plugin", "transformers")
             else c["what"] for c in items]
    return "; ".join(words)


def human_size(size: Any) -> str | None:
    return f"{size / 1e9:.2f} GB" if isinstance(size, (int, float)) and not isinstance(size, bool) and size > 0 else None


def short_digest(digest: str | None) -> str | None:
    return digest[:19] if digest else None  # sha256: and 12 hex digits, as `docker images` shows


def slug(name: str) -> str:
    """A file name for a backend name (any text): safe characters only, and a hash when it had others."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".")[:60] or "_"
    return safe if safe == name else f"{safe}-{sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


# --- the site -------------------------------------------------------------------------------------------


@dataclass
class Inputs:
    matrix_path: str
    manifest: Path | None = None
    smoke: tuple[Path, ...] = ()
    history: Path | None = None
    keep: int = 60
    now: str = field(default_factory=manifests.utc_now)


def collect(m: Matrix, inputs: Inputs) -> dict[str, Any]:
    """Everything the pages show, as plain data (the tests read it too)."""
    runs = load_history(inputs.history) if inputs.history else []
    if inputs.manifest or inputs.smoke:
        current = Run(inputs.now)
        if inputs.manifest:
            current.manifest = manifests.load(inputs.manifest, must_exist=True)
            current.sources.append(str(inputs.manifest))
        if inputs.smoke:
            current.smoke, files = load_smoke(inputs.smoke)
            current.sources += files
        runs = [r for r in runs if r.date != current.date] + [current]
    for before, run in zip(runs, runs[1:]):
        if run.manifest is None and before.manifest is not None:  # nothing published since: the same images
            run.manifest, run.inherited = before.manifest, True
    runs = runs[-inputs.keep:]
    names = list(m.names)
    for r in runs:  # backends only the inputs know (a manifest of another matrix): shown, marked as such
        for n in [*((r.manifest or {}).get("images") or {}), *r.smoke]:
            if n not in names:
                names.append(n)
    latest = runs[-1] if runs else None
    platforms: list[str] = []
    rows = []
    compat = {row["backend"]: row for row in report.compat_rows(m, latest.manifest if latest else None)}
    for name in names:
        b = _backend(m, name)
        series = [state(m, name, r) for r in runs]
        now = series[-1] if series else state(m, name, None)
        prev = next((s for s in reversed(series[:-1]) if s["known"]), None)
        own = list(b.platforms) if b else ([now["platform"]] if now["platform"] else [])
        for p in own:
            if p not in platforms:
                platforms.append(p)
        ran = [s for s in series if s["result"] in (PASS, FAIL)]
        since = None  # the first run of the current streak: green (or red) since when
        for s in reversed(series):
            if s["result"] != now["result"]:
                break
            since = s["date"]
        c = compat.get(name) or {}
        rows.append({
            "backend": name, "slug": slug(name), "in_matrix": b is not None,
            "description": b.description if b else "not in matrix.yaml",
            "device": b.device if b else None, "containerizable": b.containerizable if b else True,
            "platforms": own, "now": now, "previous": prev, "changes": changes(prev, now) if prev else [],
            "history": series, "ran": len(ran), "since": since if now["result"] in (PASS, FAIL) else None, "changed": _changed_words(changes(prev, now) if prev else []),
            "never_passed": (b is None or b.containerizable) and not any(s["result"] == PASS for s in series),
            **_needs(now, c, b),
            "size": human_size(now["size"]), "digest_short": short_digest(now["digest"]),
            **_lines(m, b),
            "pins": ({"torch": b.torch.version, **({b.plugin.package: b.plugin.version} if b.plugin else {}),
                      "transformers": m.transformers, "accelerate": m.accelerate} if b else {}),
            "base_image": b.base_image if b else None,
            "run_why": b.run.why if b else None,
            "reason": (b.reason or "no container can reach it") if b and not b.containerizable else None,
        })
    platforms.sort(key=lambda p: (not p.startswith("linux/"), p))
    for row in rows:
        row["cells"] = [_cell(row, p) for p in platforms]
    return {"now": inputs.now, "matrix": inputs.matrix_path, "runs": [{"date": r.date, "name": _basic(r.date),
            "sources": r.sources} for r in runs], "platforms": platforms, "rows": rows,
            "manifest": str(inputs.manifest) if inputs.manifest else None,
            "smoke": [str(p) for p in inputs.smoke], "history": str(inputs.history) if inputs.history else None,
            "latest": latest.date if latest else None, "previous": runs[-2].date if len(runs) > 1 else None}


def _needs(now: dict[str, Any], compat: dict[str, Any], b: Backend | None) -> dict[str, Any]:
    """The host driver minimum and device architectures: what the published image's labels record (the manifest's
    "requires"), else what the matrix says (as `envbuild list --compat`)."""
    req = now.get("requires")
    if req and req.get("driver"):
        driver = str(req["driver"]) + (f" ({req['stack']})" if req.get("stack") not in (None, "none") else "")
        arch = req.get("arch")
        return {"min_driver": driver, "architectures": ", ".join(map(str, arch)) if isinstance(arch, list) else str(arch or "-"),
                "needs_from": "the image's labels"}
    return {"min_driver": compat.get("min driver") or ("none" if b and b.device == "cpu" else "-"),
            "architectures": compat.get("architectures") or "-", "needs_from": "matrix.yaml" if compat else None}


def _cell(row: dict[str, Any], platform: str) -> dict[str, Any]:
    now = row["now"]
    if platform not in row["platforms"]:
        return {"result": NONE, "symbol": SYMBOL[NONE], "word": WORD[NONE], "platform": platform, "note": None, "device": None,
                "since": None}
    result = now["result"] if now["result"] == IMPOSSIBLE or now["platform"] == platform else NOT_RUN
    note = now["error"] if result == FAIL else (row["reason"] if result == IMPOSSIBLE else None)
    return {"result": result, "symbol": SYMBOL[result], "word": WORD[result], "platform": platform, "note": note,
            "device": now["device_name"] if result in (PASS, FAIL) else None,
            "since": row["since"] if result in (PASS, FAIL) else None}


def _lines(m: Matrix, b: Backend | None) -> dict[str, Any]:
    """The `docker run` and `envbuild run` lines, from the functions `show` and `run --dry-run` use."""
    if b is None or not b.containerizable:
        return {"docker_run": None, "envbuild_run": None, "envbuild_run_docker": None, "run_flags": None, "tags": []}

    command = ("python", "train.py")
    inv = invocation(m, b, RunOptions(mount_workdir=False, command=command), interactive=False, books=False)
    flags = b.run.docker_args()
    return {
        "docker_run": report.run_command(m, b),
        "envbuild_run": shlex.join(["envbuild", "run", "--backend", b.name, "--", *command]),
        "envbuild_run_docker": inv.display(),
        "run_flags": shlex.join(flags) if flags else "(none needed)",
        "tags": m.tags(b),
    }


def markdown(data: dict[str, Any]) -> str:
    """The grid for a CI job summary ($GITHUB_STEP_SUMMARY); values are escaped, never markup."""
    def md(value: Any) -> str:
        # HTML escaped, then every character Markdown reads as markup (a link, emphasis, code, a table cell)
        # backslash-escaped: text stays text
        return re.sub(r"([\\`*_{}\[\]()#+!|~])", r"\\\1", html.escape(str(value), quote=False))

    cols = ["backend", *data["platforms"], "size", "torch", "plugin", "transformers", "min driver", "digest", "signature"]
    rows = []
    for r in data["rows"]:
        row = {"backend": md(r["backend"]) + (" (never passed)" if r["never_passed"] else "")}
        for c in r["cells"]:
            row[c["platform"]] = f"{c['symbol']} {c['word']}" + (f" ({md(c['device'])})" if c["device"] else "")
        v = r["now"]["versions"]
        row |= {"size": r["size"] or "-", "torch": md(v.get("torch") or "-"), "plugin": md(v.get("plugin") or "-"),
                "transformers": md(v.get("transformers") or "-"), "min driver": md(r["min_driver"]),
                "digest": f"`{md(r['digest_short'])}`" if r["digest_short"] else "-",
                "signature": md(r["now"]["signature"] or "not recorded")}
        rows.append(row)
    head = f"### envbuild matrix status, {data['latest'] or 'no runs'}\n\n"
    return head + report.markdown_table(rows, cols) + f"\nBuilt {data['now']} from {_inputs_text(data)}.\n"


def _inputs_text(data: dict[str, Any]) -> str:
    parts = [f"matrix {data['matrix']}"]
    if data["manifest"]:
        parts.append(f"manifest {data['manifest']}")
    if data["smoke"]:
        parts.append("smoke reports " + ", ".join(data["smoke"]))
    if data["history"]:
        parts.append(f"history {data['history']} ({len(data['runs'])} runs kept)")
    return "; ".join(parts)


def build(m: Matrix, inputs: Inputs, output: Path, echo: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """Write the site to `output`: built beside it, then swapped in whole (a failure leaves the old site)."""
    data = collect(m, inputs)
    data["inputs_text"] = _inputs_text(data)
    output = output.resolve()
    if output.exists() and (not output.is_dir() or (any(output.iterdir()) and not _ours(output))):
        raise InvalidInput(f"--output {output}: exists and is not a site envbuild wrote (no {MARKER} in it): "
                           "give a new or empty folder")
    output.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=".site-", dir=output.parent))
    try:
        _write(data, inputs, stage)
        old = None
        if output.exists():
            old = output.with_name(f".{output.name}.old-{stage.name}")
            output.rename(old)
        stage.rename(output)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    echo(f"site: {output}/index.html ({len(data['rows'])} backends, {len(data['runs'])} runs)")
    return data


def _write(data: dict[str, Any], inputs: Inputs, out: Path) -> None:
    (out / "backend").mkdir()
    (out / "charts").mkdir()
    for static in ("style.css", "site.js"):
        shutil.copyfile(HERE / static, out / static)
    for row in data["rows"]:
        row["charts"] = charts.draw(row, out / "charts") if row["containerizable"] else {}
    page = _env.get_template("index.html.j2").render(data=data, root="", title="envbuild: the matrix at a glance")
    (out / "index.html").write_text(page, encoding="utf-8")
    for row in data["rows"]:
        text = _env.get_template("backend.html.j2").render(data=data, row=row, root="../", title=f"envbuild: {row['backend']}")
        (out / "backend" / f"{row['slug']}.html").write_text(text, encoding="utf-8")
    (out / "grid.md").write_text(markdown(data), encoding="utf-8")
    (out / MARKER).write_text(MARKER_TEXT, encoding="utf-8")
    _write_history(inputs, data, out / "history")


def _write_history(inputs: Inputs, data: dict[str, Any], out: Path) -> None:
    """The runs shown, in the --history format (one folder per run), and index.json listing their files: the
    next nightly fetches them from the published site."""
    index = []
    out.mkdir()
    sources = {r["name"]: r["sources"] for r in data["runs"]}
    for name, files in sources.items():
        folder = out / name
        folder.mkdir()
        written = []
        for i, f in enumerate(files):
            src = Path(f)
            target = f"{i:03d}-{re.sub(r'[^A-Za-z0-9_.-]', '_', src.name)}"
            shutil.copyfile(src, folder / target)
            written.append(target)
        index.append({"run": name, "files": written})
    (out / "index.json").write_text(json.dumps({"format": 1, "runs": index}, indent=1) + "\n", encoding="utf-8")

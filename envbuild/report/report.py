"""Output for people and for tools, in one place: tables, backend descriptions, smoke summaries, JUnit,
Markdown for CI job summaries, and the reports of detect, doctor and env."""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING, Any

from envbuild.core.errors import InvalidInput
from envbuild.core.files import read_json
from envbuild.core.text import shown
from envbuild.matrix import Backend, Matrix, compat, not_containerizable_message, stacks
from envbuild.smoke.runner import result_problem

if TYPE_CHECKING:
    from pathlib import Path

    from envbuild.host.detect import Detection, Finding
    from envbuild.host.doctor import Report
    from envbuild.workspace.venv import EnvResult


def backend_summary(b: Backend, m: Matrix | None = None) -> dict[str, Any]:
    row = {
        "backend": b.name,
        "device": b.device,
        "description": b.description,
        "containerizable": b.containerizable,
        "base_image": b.base_image or "-",
        "torch": b.torch.version + (" (base image)" if b.torch.source == "base" else ""),
        "plugin": f"{b.plugin.package}=={b.plugin.version}" if b.plugin else "-",
    }
    if m is not None:
        row["transformers"] = m.pin("transformers", b)
    return row


LIST_WIDTH = 100  # `envbuild list` fits this many columns: the base image is cut to fit (in full: show, --json)
LIST_COLUMNS = ["backend", "description", "torch", "transformers", "base image"]


def list_rows(m: Matrix) -> list[dict[str, Any]]:
    """What `envbuild list` shows a person: what each backend is, its torch and transformers, its base."""
    rows = []
    for b in m.backends:
        rows.append({
            "backend": b.name,
            "description": b.description,
            "torch": b.torch.version + (" (base)" if b.torch.source == "base" else ""),
            "transformers": m.pin("transformers", b),
            "base image": b.base_image or "none: no container (`envbuild env`)",
        })
    return rows


def fitted_table(rows: list[dict[str, Any]], columns: list[str], width: int = LIST_WIDTH) -> str:
    """table(), its last column cut (with '...') so that every line fits `width`."""
    last = columns[-1]
    others = [max([len(c)] + [len(str(r.get(c, ""))) for r in rows]) for c in columns[:-1]]
    room = max(width - sum(w + 2 for w in others), len(last) + 3)
    cut = [{**r, last: v if len(v := str(r.get(last, ""))) <= room else v[:room - 3] + "..."} for r in rows]
    return table(cut, columns)


def run_command(m: Matrix, b: Backend, image: str | None = None, command: str = "envbuild-probe") -> str:
    image = image or m.tags(b)[0]
    return shlex.join(b.run.command_line(image, shlex.split(command)))


def backend_detail(m: Matrix, b: Backend) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "backend": b.name,
        "description": b.description,
        "device": b.device,
        "containerizable": b.containerizable,
    }
    if b.variant_of:
        detail["variant_of"] = b.variant_of
    if not b.containerizable:
        detail["reason"] = not_containerizable_message(b)
    detail |= {
        "base_image": b.base_image,
        "platforms": list(b.platforms),
        "torch": {"version": b.torch.version, "source": b.torch.source, "index_url": b.torch.index_url},
        "plugin": (
            {
                "package": b.plugin.package,
                "version": b.plugin.version,
                "source": b.plugin.source,
                "index_url": b.plugin.index_url,
                "pairing": b.plugin.pairing,
                "needs": b.plugin.needs,
            }
            if b.plugin
            else None
        ),
        "transformers": m.pin("transformers", b),
        "accelerate": m.pin("accelerate", b),
        "import": b.import_module,
        "availability": b.availability,
        # How the probe proves the device: torch.accelerator (torch 2.6+), else the matrix's call.
        "device_check": None if b.device == "cpu" else (b.availability or "torch.accelerator"),
        "apt": list(b.apt),
        "env": dict(b.env),
        "docker_run_flags": b.run.docker_args(),
        "docker_run_why": b.run.why,
        "runs_on": list(b.runs_on),
        # What it needs of the host (also its dev.envbuild.requires.* labels).
        "requires": _needs(b).to_json(b.device),
        # The GPU architectures its torch carries, per platform (declared; the build fails where torch differs).
        "architectures": _architectures(b),
    }
    if b.containerizable:
        detail["tags"] = m.tags(b)
        detail["docker_run"] = run_command(m, b)
    if len(family := m.family(b)) > 1:  # the images of one device for other drivers and devices: `envbuild pick`
        detail["variants"] = [{"backend": v.name, "base_image": v.base_image, "tags": m.tags(v),
                               "architectures": _architectures(v),
                               **{k: val for k, val in _needs(v).to_json(v.device).items() if k != "source"}}
                              for v in family]
    return detail


def _architectures(b: Backend) -> dict[str, list[str] | None] | None:
    """platform -> the architectures declared for it (None: none declared; linux/arm64's torch list is declared on
    its own, host.arch_arm64, or not at all)."""
    if b.host is None or not b.host.arch:
        return None
    return {p: None if p.endswith("arm64") and stacks.STACKS[b.host.stack].torch_archs and not b.host.arch_arm64
            else list(stacks.declared_arch(b, p)) for p in b.platforms}


def _needs(b: Backend) -> Any:
    return compat.needs(b)


def requires_text(req: dict[str, Any]) -> str:
    """'NVIDIA driver >= 595.45.04 (cuda 13.2; source: ...); GPU architectures: unknown'."""
    if not req.get("stack"):
        driver = "no host driver" if req.get("arch") == "any" else "host driver: not known to envbuild"
    elif req.get("min_driver") and req.get("compat_driver"):
        driver = (f"{req['driver']} driver >= {req['compat_driver']} under minor version compatibility, >= "
                  f"{req['min_driver']} natively ({req['stack']} {req['stack_version']}"
                  + ("" if req.get("confirmed") else ", UNCONFIRMED") + f"; source: {req.get('source')})")
    elif req.get("min_driver"):
        driver = f"{req['driver']} driver >= {req['min_driver']} ({req['stack']} {req['stack_version']}"
        driver += ("" if req.get("confirmed") else ", UNCONFIRMED") + f"; source: {req.get('source')})"
    else:
        driver = f"{req['driver']} driver, minimum unknown ({req['stack']} {req['stack_version']})"
    arch = req.get("arch")
    archs = "any" if arch == "any" else (", ".join(arch) if arch else "unknown (the build records torch's own list)")
    return f"{driver}; device architectures: {archs}"


# What `show` leaves to --verbose and --json: how the probe and CI see a backend, not what a person picks it by.
SHOW_VERBOSE = ("import", "device_check", "apt", "env", "runs_on")


def describe(detail: dict[str, Any], verbose: bool = False) -> str:
    lines = [f"{detail['backend']}: {detail['description']}" + (f" (device string '{detail['device']}')" if verbose else "")]
    if not detail["containerizable"]:
        lines.append(f"  not containerizable: {detail['reason']}")
    for key in ("variant_of", "base_image", "platforms", "torch", "plugin", "transformers", "accelerate", "import", "device_check", "apt", "env", "tags", "runs_on"):
        if key in SHOW_VERBOSE and not verbose:
            continue
        value = detail.get(key)
        if value in (None, [], {}):
            continue
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items() if v is not None)
        elif isinstance(value, list):
            value = ", ".join(value)
        lines.append(f"  {key + ':':<14}{value}")
    if detail.get("requires"):
        lines.append(f"  {'requires:':<14}{requires_text(detail['requires'])}")
    if detail.get("docker_run"):
        flags = detail["docker_run_flags"]
        lines.append(f"  {'run flags:':<14}{shlex.join(flags) if flags else '(none needed)'}")
        if detail.get("docker_run_why") and verbose:
            lines.append(f"  {'why:':<14}{detail['docker_run_why']}")
        lines.append(f"  {'docker run:':<14}{detail['docker_run']}")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    cells = [[str(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    out = ["  ".join(c.upper().ljust(w) for c, w in zip(columns, widths)).rstrip()]
    out += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(out)


def smoke_summary(result: Any) -> str:
    """A few lines for people: one per check, then the verdict."""
    lines = []
    for ch in result.checks:
        mark = "skip" if ch.get("skipped") else "ok  " if ch.get("ok") else "FAIL"
        lines.append(f"  {mark} {ch.get('name', '?'):<13} {ch.get('message', '')}")
    verdict = "passed" if result.ok else "FAILED"
    where = f" on {result.platform}{' (emulated)' if result.emulated else ''}" if getattr(result, "platform", None) else ""
    lines.append(f"{result.backend}: smoke {verdict} in {result.seconds:.1f}s ({result.image}{where})")
    if result.error and not result.ok:
        lines.append(f"  reason: {result.error}")
        if result.stderr_tail and not result.checks:
            lines += ["  container stderr (last lines):"] + [f"    {ln}" for ln in result.stderr_tail.splitlines()]
    return "\n".join(lines)


def smoke_docs(f: Path, doc: Any, strict: bool) -> list[dict[str, Any]]:
    """The `smoke --json` results in one JSON document read from `f`; [] for other JSON in a folder (strict: a file
    given by name, which must be one; refused otherwise, naming it: exit 2)."""
    items = doc if isinstance(doc, list) else [doc]
    if not strict and not any(isinstance(d, dict) and {"backend", "ok", "checks"} <= d.keys() for d in items):
        return []  # another JSON file in an artifacts folder
    why = next((w for w in map(result_problem, items) if w), None) if items else "an empty list"
    if why:
        raise InvalidInput(f"{shown(str(f))}: not the output of `envbuild smoke --json`: {why}")
    return items


def read_smoke_results(paths: list[Path] | tuple[Path, ...]) -> list[dict[str, Any]]:
    """`smoke --json` documents from files, or folders searched for *.json (another JSON file in an artifacts
    folder is passed over); a file given by name that is not such a document is refused, naming it (exit 2)."""
    docs: list[dict[str, Any]] = []
    for path in paths:
        for f in sorted(path.rglob("*.json")) if path.is_dir() else [path]:
            docs += smoke_docs(f, read_json(f, shown(str(f)), InvalidInput), strict=not path.is_dir())
    return docs


BUILD_COLUMNS = ["backend", "result", "seconds", "image"]


def build_line(result: Any) -> str:
    """One build's outcome: what was built or found up to date, and its tags (every build is loaded and tagged:
    another platform's image under REPO:BACKEND-ARCH); or why it failed."""
    if not result.ok:
        return f"{result.backend}: build FAILED: {result.error}"
    where = f"tagged {', '.join(result.tags)}"
    what = "up to date (nothing changed since its last build; --no-cache builds anyway)" if result.up_to_date \
        else f"built {result.image_id[:19]} in {result.seconds:.0f}s"
    return f"{result.backend}: {what}, {where}"


def build_rows(results: list[Any]) -> list[dict[str, Any]]:
    """One row per backend of a build of several (BUILD_COLUMNS)."""
    return [{"backend": r.backend, "result": ("up to date" if r.up_to_date else "ok") if r.ok else "FAILED",
             "seconds": f"{r.seconds:.0f}",
             "image": (r.tags[0] if r.tags else "(in the builder)") if r.ok else (r.error or "")[:70]} for r in results]


LOCK_PROBLEMS = ("stale", "missing", "wrong torch")  # what `lock --check` fails on


def lock_line(result: Any) -> str:
    """One lock's state: backend (platform): file status (distributions): why."""
    why = f": {'; '.join(result.why)}" if result.why and result.status != "up to date" else ""
    count = f" ({result.count} distributions)" if result.count else ""
    return f"{result.backend} ({result.platform}): {result.path} {result.status}{count}{why}"


def junit_xml(results: list[Any]) -> str:
    """JUnit XML that CI systems render: a suite per backend, a test case per probe check."""
    suites = ET.Element("testsuites", name="envbuild smoke")
    for r in results:
        checks = r.checks or [{"name": "probe", "ok": False, "message": r.error or "no report", "seconds": r.seconds}]
        failures = sum(1 for ch in checks if not ch.get("ok"))
        suite = ET.SubElement(
            suites, "testsuite", name=f"envbuild.smoke.{r.backend}", tests=str(len(checks)),
            failures=str(failures), errors="0", time=f"{r.seconds:.3f}",
        )
        ET.SubElement(ET.SubElement(suite, "properties"), "property", name="image", value=r.image)
        for ch in checks:
            case = ET.SubElement(
                suite, "testcase", classname=f"envbuild.smoke.{r.backend}", name=str(ch.get("name")),
                time=f"{float(ch.get('seconds') or 0):.3f}",
            )
            if not ch.get("ok"):
                fail = ET.SubElement(case, "failure", message=str(ch.get("message", ""))[:500])
                fail.text = str(ch.get("message", ""))
        if r.stderr_tail and not r.ok:
            ET.SubElement(suite, "system-err").text = r.stderr_tail
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# --- Markdown for CI job summaries ($GITHUB_STEP_SUMMARY) -------------------------------------------------


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|").replace("\n", " ").strip() or " "

    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    out += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(out) + "\n"


def smoke_rows(results: list[dict[str, Any]], expected: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """One row per backend from `smoke --json` documents; an expected backend without a result says so."""
    by_backend = {r.get("backend"): r for r in results if isinstance(r, dict)}
    names = list(dict.fromkeys([*expected, *by_backend]))
    rows = []
    for name in names:
        r = by_backend.get(name)
        if r is None:
            rows.append({"backend": name, "result": "no result", "checks": "-", "seconds": "-", "image": "-",
                         "reason": "the job produced no smoke result (pull or runner failed)"})
            continue
        checks = [c for c in r.get("checks") or [] if isinstance(c, dict)]
        rows.append({
            "backend": name,
            "result": "passed" if r.get("ok") else "FAILED",
            "checks": f"{sum(1 for c in checks if c.get('ok'))}/{len(checks)}",
            "seconds": f"{float(r.get('seconds') or 0):.0f}",
            "image": r.get("image") or "-",
            "reason": "" if r.get("ok") else (r.get("error") or "failed"),
        })
    return rows


def published_rows(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per backend whose push landed (manifest entries)."""
    rows = []
    for e in entries:
        smoke = e.get("smoke")
        verdict = "not run" if not smoke else ("passed" if smoke.get("ok") else "FAILED")
        if smoke:
            verdict += f" ({smoke.get('passed', 0)}/{smoke.get('passed', 0) + smoke.get('failed', 0)} checks)"
        rows.append({
            "backend": e["backend"],
            "tags": ", ".join(f"`{t}`" for t in e.get("tags", [])),
            "digest": f"`{e['digest']}`",
            "smoke": verdict,
            "revision": (e.get("git_revision") or "-")[:12],
        })
    return rows


CI_COLUMNS = ["backend", "platform", "device", "runs-on", "smoke", "image"]


def ci_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The CI job matrix (ci.github_matrix) as table rows (CI_COLUMNS): runner labels joined, smoke yes or no."""
    return [{**j, "runs-on": ",".join(j["runs-on"]), "smoke": "yes" if j["smoke"] else "no"} for j in doc["include"]]


def published_lines(result: Any, manifest: Any) -> list[str]:
    """What a publish of one backend says it pushed (its failure, if any, is the caller's to say on stderr): each
    platform's digest and the index, or the one image, and the manifest that records it."""
    lines = []
    entry = result.entry or {}
    if entry.get("platforms"):
        what = "index" if entry.get("index") else "platform image"
        lines += [f"{result.backend}: {plat} {rec['digest']}" for plat, rec in entry["platforms"].items()]
        if entry.get("index") or result.ok:
            lines.append(f"{result.backend}: pushed {what} {', '.join(result.refs)} ({result.digest}); recorded in {manifest}")
    elif result.ok:
        signed = " signed and attested;" if entry.get("signed") else ""
        lines.append(f"{result.backend}: pushed {', '.join(result.refs)} ({result.digest});{signed} recorded in {manifest}")
    return lines


def pulled_text(result: Any, manifest: Any = None) -> str:
    """What a pull says: the reference and digest that arrived (verified against `manifest`, when given), the tags
    it got here, and how to run and smoke-test it."""
    verified = f", verified against {manifest}" if result.verified else ""
    on = f" for {result.platform}{' (runs under QEMU emulation)' if result.emulated else ''}" if result.platform else ""
    lines = [f"{result.backend}: pulled {result.ref}{on} ({result.digest}{verified})"]
    if len(result.tagged) > 1:
        lines.append(f"{result.backend}: tagged as {', '.join(result.tagged[1:])}")
    lines.append(f"run it (self-test):  {result.docker_run}")
    lines.append(f"smoke-test it:       envbuild smoke --backend {result.backend}"
                 + (f" --platform {result.platform}" if result.platform and result.emulated else ""))
    return "\n".join(lines)


def published_summary(entries: list[dict[str, Any]]) -> str:
    """The Markdown a CI job summary gets of a publish: what landed (manifest entries), or that nothing did."""
    table_ = markdown_table(published_rows(entries), ["backend", "tags", "digest", "smoke", "revision"]) if entries \
        else "Nothing landed.\n"
    return "### Published images\n\n" + table_


# --- the compatibility table: which image fits which host ------------------------------------------------

COMPAT_COLUMNS = ["backend", "device", "torch", "plugin", "min driver", "architectures", "platforms", "image size",
                  "last smoke"]
COMPAT_BEGIN = "<!-- generated by `envbuild list --compat --markdown`: do not edit; `envbuild list --compat --check FILE` -->"


def compat_rows(m: Matrix, manifest: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per containerizable backend: what its image needs of the host, from the matrix; the image size and
    last smoke result from a manifest when one is given."""
    images = (manifest or {}).get("images") or {}
    rows = []
    for b in m.containerizable():
        req = _needs(b).to_json(b.device)
        entry = images.get(b.name) or {}
        smoke = entry.get("smoke")
        size = entry.get("size")
        driver = "none" if b.device == "cpu" else "not known"
        if req["stack"]:
            lowest = req["compat_driver"] or req["min_driver"]
            driver = f"{req['driver']} >= {lowest}" if lowest else f"{req['driver']} (unknown)"
            minor = f"; minor version compatibility; >= {req['min_driver']} native" if req["compat_driver"] else ""
            driver += f" ({req['stack']} {req['stack_version']}{minor}{'' if req['confirmed'] or not req['min_driver'] else ', UNCONFIRMED'})"
        arch = req["arch"]
        arm = list(stacks.declared_arch(b, "linux/arm64"))
        if isinstance(arch, list) and arm and arm != arch and "linux/arm64" in b.platforms:
            arch = f"{', '.join(arch)} (arm64: {', '.join(arm)})"
        if not arch and (floor := stacks.arch_floor(stacks.STACKS[req["stack"]], req["stack_version"]) if req["stack"] else None):
            arch = f"{floor} and newer (exact list recorded at build)"
        rows.append({
            "backend": b.name, "device": b.device, "torch": b.torch.version,
            "plugin": f"{b.plugin.package} {b.plugin.version}" if b.plugin else "-",
            "min driver": driver,
            "architectures": arch if isinstance(arch, str) else (", ".join(arch) if arch else "recorded at build"),
            "platforms": ", ".join(p.arch for p in b.platforms),
            "image size": f"{size / 1e9:.1f} GB" if isinstance(size, (int, float)) and size else "-",
            "last smoke": "-" if not isinstance(smoke, dict) else (("passed" if smoke.get("ok") else "FAILED")
                                                                   + (f" {str(smoke.get('date'))[:10]}" if smoke.get("date") else "")),
            "requires": req,
        })
    return rows


def compat_markdown(rows: list[dict[str, Any]]) -> str:
    return f"{COMPAT_BEGIN}\n\n{markdown_table(rows, COMPAT_COLUMNS)}"


# --- the host: detect, doctor, env ---------------------------------------------------------------------


def root_facts(root: Any) -> dict[str, Any]:
    """With --root (detect, doctor), which facts came from where, for the JSON output; nothing without one."""
    if root is None:
        return {}
    return {"root": str(root), "facts": {"files": f"read under {root}", "programs": "this machine's PATH only; nothing under "
                                         "the root is run", "engine": "not asked (detect) / this machine's (doctor)"}}


def detect_text(detection: Detection) -> str:
    """Short human report: one line per detected backend, then hints about what is missing."""
    found = [detection.finding(n) for n in detection.detected]
    lines = [f"  {f.backend:<8} {f.description}: {_evidence_line(f)}" for f in found]
    lines = ["Detected:", *lines] if lines else ["No accelerator detected."]
    lines.append(f"  {detection.fallback:<8} always available (fallback)")
    hints = []
    for f in detection.findings:
        if f.detected and f.missing and f.backend != detection.fallback:
            hints.append(f"  {f.backend}: missing {'; '.join(f.missing)}")
        elif not f.detected and any(e.kind != "note" for e in f.evidence):
            hints.append(f"  {f.backend} not detected: found {_evidence_line(f)}; missing {'; '.join(f.missing)}")
    if hints:
        lines += ["Hints:", *hints]
    return "\n".join(lines)


def _evidence_line(f: Finding) -> str:
    kinds: dict[str, list[str]] = {}
    for e in f.evidence:
        kinds.setdefault(e.kind, []).append(e.detail)
    return "; ".join(f"{k} {', '.join(v)}" for k, v in kinds.items())


def doctor_text(report: Report) -> str:
    width = max(len(c.name) for c in report.checks)
    lines = [f"envbuild doctor: {report.backend} ({report.description})"]
    for c in report.checks:
        lines.append(f"  {c.status:<4}  {c.name:<{width}}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"        {'':<{width}}  fix: {c.fix}")
    from envbuild.host.doctor import purposes

    how = "" if report.containerizable else " natively (`envbuild env`)"
    for purpose, ok in report.verdicts.items():
        blockers = report.blockers_for(purpose)
        warn = [c.name for c in report.checks if not c.ok and not c.skipped and not c.blocking and purpose in purposes(c)]
        where = f"{report.backend} here{how if purpose == 'run' else ''}"
        if ok:
            lines.append(f"Can {purpose} {where}" + (f" (warnings: {', '.join(warn)})." if warn else "."))
        else:
            lines.append(f"Cannot {purpose} {where}: {len(blockers)} blocking problem(s): "
                         f"{', '.join(c.name for c in blockers)}.")
    if report.containerizable and report.verdicts.get("build") and not report.verdicts.get("run"):
        lines.append(f"Building needs no {report.description}: build here, run the image where one is.")
    return "\n".join(lines)


def env_text(result: EnvResult) -> str:
    p = result.plan
    pins = " ".join(f"{d}=={v}" for d, v in p.pins.items())
    lines = [f"{p.backend}: environment at {p.dir} (Python {result.python_version}, {p.platform}): {pins}"]
    if result.probe is not None or result.probe_error:
        if result.ok:
            t = (result.probe or {}).get("timings", {}).get("total")
            lines.append(f"{p.backend}: probe passed" + (f" in {t:.1f}s" if isinstance(t, (int, float)) else "")
                         + f" on {p.device}")
        else:
            lines.append(f"{p.backend}: probe FAILED: {result.probe_error}")
    lines.append(f"Use it: source {p.dir / 'bin' / 'activate'}; test it again: {shlex.join(p.probe_command())}")
    return "\n".join(lines)


# --- outdated ---------------------------------------------------------------------------------------------

OUTDATED_COLUMNS = ["pin", "current", "newest", "fits", "note"]


def outdated_rows(findings: list[Any]) -> list[dict[str, Any]]:
    rows = []
    for f in findings:
        if f.error:
            note = f"not asked: {f.error}"
        else:
            note = "; ".join(f.why)
            moved = {k: v for k, v in f.also.items() if k != f.field}
            if moved:
                note = "; ".join(x for x in (note, "with " + ", ".join(f"{k}={v}" for k, v in moved.items())) if x)
        rows.append({"pin": f.field, "current": f.current, "newest": f.newest or "?", "fits": f.fits or "?",
                     "note": "; ".join(x for x in ("newer" if f.newer else "", note) if x)})
    return rows


# --- config -------------------------------------------------------------------------------------------------


def settings_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`envbuild config`'s rows: an unset value shows as '-', a password in a URL as '***'."""
    import re

    def safe(value: Any) -> Any:
        return re.sub(r"(://[^/:@\s]+:)[^/@\s]+@", r"\1***@", value) if isinstance(value, str) else value

    return [{**r, "value": safe(r["value"]) if r["value"] is not None else None} for r in rows]

"""The manifest of published images: what landed where (digest, versions, provenance, smoke result).

{"schema": 1, "images": {backend: entry}}; an entry is replaced only when every tag of its backend landed,
and the file is rewritten atomically with the other backends' entries kept.
"""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from envbuild.core.errors import InvalidInput, ManifestError
from envbuild.core.files import exclusive, parse_json, read_json, read_project, write_atomic
from envbuild.core.text import shown
from envbuild.core.imageref import DIGEST, Reference, check_repository
from envbuild.core.shape import Each, problem
from envbuild.smoke.runner import result_problem

SCHEMA = 1
# What the manifest keeps of a smoke result (smoke_summary), and of each platform of an entry: the parts that are
# read back (by publish --index-from, pull, pick, report and the site) are checked for shape when the file is loaded.
SMOKE_SUMMARY = {"ok": bool, "passed?": int, "failed?": int, "failed_checks?": [str], "skipped_checks?": [str],
                 "error?": (str, None), "image?": (str, None), "image_id?": (str, None), "seconds?": (float, None),
                 "date?": (str, None), "platform?": (str, None), "emulated?": (bool, None)}
PLATFORM_RECORD = {"digest": DIGEST, "smoke?": (SMOKE_SUMMARY, None), "ref?": (str, None), "image_id?": (str, None),
                   "content_tag?": (str, None), "unchanged_since?": (str, None), "platform?": (str, None)}
ENTRY = {"digest": DIGEST, "smoke?": (SMOKE_SUMMARY, None), "platforms?": (Each(PLATFORM_RECORD), None),
         "tags?": ([str], None), "repository?": (str, None), "backend?": (str, None), "date?": (str, None),
         "failed_platforms?": (Each(str), None)}
DEFAULT = "envbuild-manifest.json"
MAX_MANIFEST = 16 << 20  # a manifest of every backend and platform is tens of KB
LABEL = "dev.envbuild."
REVISION_LABEL = "org.opencontainers.image.revision"


def load(path: Path, *, must_exist: bool) -> dict[str, Any]:
    """{"schema": 1, "images": {backend: entry}}; a missing file is an empty manifest unless must_exist."""
    if not path.exists() and not path.is_symlink():
        if must_exist:  # a file the user named: bad input (exit 2), not the world's failure
            raise InvalidInput(f"manifest {path}: no such file (publish writes it: `envbuild publish --manifest {path}`)")
        return {"schema": SCHEMA, "images": {}}
    # a file a pull request may bring (pick --manifest in CI): a regular file in its folder, bounded
    doc = parse_json(read_project(path, f"manifest {path}", InvalidInput, limit=MAX_MANIFEST), f"manifest {path}",
                     InvalidInput)
    if not isinstance(doc, dict) or not isinstance(doc.get("images"), dict):
        raise InvalidInput(f"manifest {path}: expected an object with \"schema\" and \"images\" (is this an envbuild manifest?)")
    if doc.get("schema") != SCHEMA:
        raise InvalidInput(f"manifest {path}: schema {doc.get('schema')!r} is not supported (this envbuild reads schema {SCHEMA})")
    for name, entry in doc["images"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("digest"), str) or not DIGEST.match(entry["digest"]):
            raise InvalidInput(f"manifest {path}: images.{shown(name)}: expected an entry with a \"digest\" such as "
                               "sha256:<64 hex>")
        why = problem(entry, ENTRY, f"images.{shown(name)}") or _reference_problem(entry, f"images.{shown(name)}")
        if why:
            raise InvalidInput(f"manifest {path}: {why} (as `envbuild publish` writes it; publish again to rewrite it)")
    return doc


def _reference_problem(entry: dict[str, Any], where: str) -> str | None:
    """Why an entry's repository or tags are not what an image reference holds (they reach pick's stdout, which
    scripts run): None when they are."""
    if entry.get("repository") is not None:
        try:
            check_repository(entry["repository"], "repository")
        except InvalidInput:
            return f"{where}.repository: {shown(entry['repository'][:120])!r} is not an image repository"
    for ref in entry.get("tags") or []:
        try:
            if not ref.isascii():
                raise InvalidInput(ref)
            Reference.parse(ref)
        except InvalidInput:
            return f"{where}.tags: {shown(ref[:120])!r} is not an image reference"
    return None


def record(path: Path, entry: dict[str, Any], echo: Callable[[str], None] | None = None) -> None:
    """Replace one backend's entry, keep the others: under the manifest's lock (two publishes at once both land),
    re-read, then written atomically (a crash leaves the old file whole)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with exclusive(path.parent, f"the manifest {path}", echo):  # its folder: no lock file left beside it
            doc = load(path, must_exist=False)
            doc["images"][entry["backend"]] = entry
            doc["images"] = dict(sorted(doc["images"].items()))
            write_atomic(path, json.dumps(doc, indent=2, sort_keys=False) + "\n")
    except OSError as exc:
        raise ManifestError(f"cannot write manifest {path}: {exc.strerror or exc}; it is as it was") from None


# --- smoke results --------------------------------------------------------------------------------------


def load_smoke_results(path: Path) -> dict[str, dict[str, Any]]:
    """`envbuild smoke --json` output (one result or a list) -> {backend: result}."""
    doc = read_json(path, f"--smoke-json {path}", InvalidInput)
    docs = doc if isinstance(doc, list) else [doc]
    out: dict[str, dict[str, Any]] = {}
    for d in docs:
        why = result_problem(d)
        if why:
            raise InvalidInput(f"--smoke-json {path}: not the output of `envbuild smoke --json`: {why}")
        out[d["backend"]] = d
        if isinstance(d.get("platform"), str) and d["platform"]:  # one result per platform of a backend: BACKEND@PLATFORM
            from envbuild.core.platform import canonical

            d["platform"] = canonical(d["platform"])
            out[f"{d['backend']}@{d['platform']}"] = d
    return out


def smoke_summary(result: dict[str, Any], source: Path | None = None) -> dict[str, Any]:
    """What the manifest keeps of a smoke result: the verdict, the checks, when and on what."""
    checks = [c for c in result.get("checks") or [] if isinstance(c, dict)]
    date = result.get("date")
    if not date and source is not None:
        date = datetime.fromtimestamp(source.stat().st_mtime, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "ok": bool(result.get("ok")),
        "passed": sum(1 for c in checks if c.get("ok")),
        "failed": sum(1 for c in checks if not c.get("ok")),
        "failed_checks": [str(c.get("name")) for c in checks if not c.get("ok")],
        "error": result.get("error"),
        "image": result.get("image"),
        "image_id": result.get("image_id"),
        "seconds": result.get("seconds"),
        "date": date,
        "platform": result.get("platform"),
        "emulated": result.get("emulated"),
        "skipped_checks": [str(c.get("name")) for c in checks if c.get("skipped")],
    }

# --- provenance -----------------------------------------------------------------------------------------


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def git_revision(where: Path) -> tuple[str | None, bool | None]:
    """(HEAD, dirty) of the checkout holding `where`, or (None, None) outside one."""
    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return proc.stdout if proc.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if not head:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return head.strip(), (bool(status.strip()) if status is not None else None)


def image_requires(labels: Mapping[str, str], measured_arch: list[str] | None = None) -> dict[str, Any] | None:
    """What the image needs of the host: its dev.envbuild.requires.* labels, and the architectures its build measured
    (/opt/envbuild/torch-arch.txt) over the label's; None for an image built before these labels."""
    if LABEL + "requires.driver" not in labels:
        return None
    label_arch = labels.get(LABEL + "requires.arch") or "unknown"
    return {
        "driver": labels.get(LABEL + "requires.driver"),
        "stack": labels.get(LABEL + "requires.stack"),
        "arch": measured_arch or (label_arch if label_arch in ("any", "unknown") else label_arch.split(",")),
    }


def image_versions(labels: Mapping[str, str]) -> dict[str, Any]:
    plugin = labels.get(LABEL + "plugin") or ""
    package, _, version = plugin.partition("==")
    return {
        "torch": labels.get(LABEL + "torch"),
        "plugin": {"package": package, "version": version} if package else None,
        "transformers": labels.get(LABEL + "transformers"),
        "accelerate": labels.get(LABEL + "accelerate"),
    }


"""`envbuild site`: the static status site, built from a fixture history of nightly runs and opened in a real
browser (Debian's headless chromium, which scripts/test installs).

The browser's DOM (after the page's own script ran) is what the checks read; any console message fails a page
(the site logs nothing), and a page with a deliberate error proves that detection works.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from support.constants import MATRIX as FIXED  # the product's matrix: its host driver minimums

from envbuild.report import site
from envbuild.core.errors import InvalidInput
from envbuild.matrix import load

HOSTILE = '<script>document.title="pwned"</script><img src=x onerror=alert(1)>'
EVIL = 'evil<b id="inj">x</b>'  # a backend name only a report knows: markup in it must stay text
CHECKS = ["import_torch", "import_plugin", "device", "versions", "load", "forward", "generate", "cpu_match"]
DATES = ["2026-11-27T032300Z", "2026-11-28T032300Z", "2026-11-29T032300Z", "2026-11-30T032300Z"]
NOW = "2026-12-01T03:40:00Z"
DEVICES = {"cpu": "x86_64", "cuda": "NVIDIA H200", "rocm": "AMD Instinct MI300X"}


def digest(seed: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def smoke_doc(backend: str, date: str, *, ok: bool, seconds: float, torch: str = "2.15.0", failing: tuple[str, ...] = (),
              device: str | None = None) -> dict[str, Any]:
    checks = [{"name": n, "ok": n not in failing, "message": f"{n} {'FAILED: out of memory' if n in failing else 'ok'}",
               "seconds": 0.5} for n in CHECKS]
    return {
        "backend": backend, "image": f"ghcr.io/envbuild/envbuild:{backend}", "image_id": digest(backend + date),
        "date": date, "ok": ok, "seconds": seconds, "exit_code": 0 if ok else 1,
        "error": None if ok else f"{failing[0]}: FAILED: out of memory", "checks": checks,
        "probe": {"probe": 1, "backend": backend, "device": backend, "ok": ok, "checks": checks,
                  "versions": {"python": "3.11.2", "torch": torch, "plugin": None, "transformers": "5.23.0"},
                  "device_info": {"name": device or DEVICES.get(backend, "?"), "count": 1, "api": "torch.accelerator"}},
    }


def entry(backend: str, date: str, *, size: int, torch: str = "2.15.0", signed: bool | None = True,
          smoke: dict[str, Any] | None = None, transformers: str = "5.23.0") -> dict[str, Any]:
    e: dict[str, Any] = {
        "backend": backend, "device": backend, "repository": "ghcr.io/envbuild/envbuild",
        "tags": [f"ghcr.io/envbuild/envbuild:{backend}-torch{torch}"], "digest": digest(f"{backend}{torch}{size}"),
        "platform": "linux/amd64", "size": size,
        "versions": {"torch": torch, "plugin": None, "transformers": transformers, "accelerate": "1.15.0"},
        "date": date, "smoke": smoke,
    }
    if signed is not None:
        e["signature"] = {"verified": signed}
    return e


def write_run(folder: Path, day: int, last: bool) -> None:
    """One nightly run: cpu passes (torch moves to 2.15.0 in the last run), cuda passes until the last run,
    rocm never passes, xpu is never run; a report also names a hostile backend."""
    date = f"2026-11-{27 + day:02d}T03:23:00Z" if day < 4 else NOW
    folder.mkdir(parents=True)
    cpu_torch = "2.15.0" if last else "2.14.0"
    docs = [
        smoke_doc("cpu", date, ok=True, seconds=40 + day * 3, torch=cpu_torch),
        smoke_doc("cuda", date, ok=not last, seconds=95 + day, failing=("generate",) if last else (),
                  device="NVIDIA H200" if day % 2 else "NVIDIA H100 80GB HBM3"),
        smoke_doc("rocm", date, ok=False, seconds=300, failing=("device",)),
        smoke_doc(EVIL, date, ok=True, seconds=1, torch=HOSTILE),
    ]
    (folder / "smoke").mkdir()
    for d in docs:
        (folder / "smoke" / f"smoke-{site.slug(d['backend'])}.json").write_text(json.dumps(d))
    (folder / "smoke" / "unrelated.json").write_text('{"not": "a smoke report"}')
    images = {
        "cpu": entry("cpu", date, size=3_100_000_000 + day * 10_000_000, torch=cpu_torch),
        "cuda": {**entry("cuda", date, size=9_800_000_000, signed=not last),
                 "requires": {"driver": "nvidia>=580.65.06", "stack": "cuda 13.0", "arch": ["sm_90", "sm_100"]}},
        "rocm": entry("rocm", date, size=21_000_000_000, signed=None),
        # its tags are image references (a manifest's are checked as such when read); the rest is markup to show as text
        EVIL: {**entry(EVIL, date, size=1, torch=HOSTILE, transformers=HOSTILE), "tags": ["ghcr.io/envbuild/envbuild:evil"]},
    }
    (folder / "envbuild-manifest.json").write_text(json.dumps({"schema": 1, "images": images}))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("site-inputs")
    for day, name in enumerate(DATES):
        write_run(root / "history" / name, day, last=False)
    write_run(root / "current", 4, last=True)
    return {"history": root / "history", "manifest": root / "current" / "envbuild-manifest.json",
            "smoke": root / "current" / "smoke", "root": root}


DESCRIPTION = "CPU <script>document.title=1337</script><img src=x onerror=alert(1)>"  # the matrix allows no quotes
MATRIX_SET = (f"backends.cpu.description={DESCRIPTION}",)


@pytest.fixture(scope="module")
def built(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    m = load(FIXED, MATRIX_SET)
    out = tmp_path_factory.mktemp("site") / "site"
    data = site.build(m, site.Inputs(str(FIXED), inputs["manifest"], (inputs["smoke"],), inputs["history"], now=NOW), out)
    return out, data


# --- a real browser -------------------------------------------------------------------------------------

# Debian's chromium (scripts/test installs it); Ubuntu runners may name theirs chromium-browser.
CHROMIUM = os.environ.get("ENVBUILD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CONSOLE = re.compile(r":CONSOLE[:(\]]")


def chromium(*args: str, timeout: int = 90) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM, "Debian's chromium is not installed: scripts/test installs it (apt-get install chromium)"
    import tempfile

    with tempfile.TemporaryDirectory(prefix="envbuild-chromium-") as home:  # a profile of its own, gone after
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
               f"--user-data-dir={home}", "--enable-logging=stderr", "--v=0", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, "HOME": home})


def console_messages(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE.search(line)]


def open_page(path: Path) -> str:
    """The page's DOM after its scripts ran; fails on any console message (errors, uncaught exceptions)."""
    proc = chromium("--dump-dom", path.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console_messages(proc.stderr) == [], f"{path.name}: console: {console_messages(proc.stderr)}"
    return proc.stdout


def screenshot(path: Path, png: Path, width: int, height: int) -> tuple[int, int]:
    proc = chromium(f"--screenshot={png}", f"--window-size={width},{height}", path.as_uri())
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
    assert console_messages(proc.stderr) == []
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


class Node:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Node | None) -> None:
        self.tag, self.attrs, self.parent, self.children = tag, attrs, parent, []  # type: ignore[var-annotated]

    def text(self) -> str:
        return " ".join(" ".join(c if isinstance(c, str) else c.text() for c in self.children).split())

    def find(self, pred: Any) -> list[Node]:
        out = []
        for c in self.children:
            if isinstance(c, Node):
                if pred(c):
                    out.append(c)
                out += c.find(pred)
        return out


VOID = {"meta", "link", "img", "br", "hr", "input", "source", "col", "area", "base", "wbr"}


def parse(html: str) -> Node:
    """The DOM chromium dumped, as a tree (the stdlib parser: the dump is well-formed, its end tags explicit)."""
    root = Node("#root", {}, None)

    class P(HTMLParser):
        cur = root

        def handle_starttag(self, tag, attrs):
            node = Node(tag, dict(attrs), self.cur)
            self.cur.children.append(node)
            if tag not in VOID:
                self.cur = node

        def handle_endtag(self, tag):
            n = self.cur
            while n is not root and n.tag != tag:
                n = n.parent
            if n is not root:
                self.cur = n.parent

        def handle_data(self, data):
            self.cur.children.append(data)

    P(convert_charrefs=True).feed(html)
    return root


def grid(dom: Node) -> dict[str, Node]:
    return {r.attrs["data-backend"]: r for r in dom.find(lambda n: n.tag == "tr" and "data-backend" in n.attrs)}


def cell(row: Node, key: str, value: str) -> Node:
    (found,) = row.find(lambda n: n.attrs.get(key) == value)
    return found


# --- the tests -------------------------------------------------------------------------------------------


@pytest.mark.needs("chromium")
def test_the_console_check_catches_a_deliberate_error(tmp_path: Path) -> None:
    """The browser check has teeth: a page that throws (and one that logs an error) fails it."""
    page = tmp_path / "broken.html"
    page.write_text('<!doctype html><title>t</title><p>x</p><script>console.error("deliberate"); no_such_function();</script>')
    proc = chromium("--dump-dom", page.as_uri())
    messages = console_messages(proc.stderr)
    assert any("no_such_function is not defined" in m for m in messages), proc.stderr[-2000:]
    assert any("deliberate" in m for m in messages)
    with pytest.raises(AssertionError, match="console"):
        open_page(page)
    fine = tmp_path / "fine.html"
    fine.write_text("<!doctype html><title>t</title><p>x</p><script>document.title = 'ran';</script>")
    assert "<title>ran</title>" in open_page(fine)


@pytest.mark.needs("chromium")
def test_the_grid_in_the_browser_matches_the_inputs(built: tuple[Path, dict[str, Any]]) -> None:
    out, _ = built
    dom = parse(open_page(out / "index.html"))
    rows = grid(dom)
    assert list(rows) == [*load(FIXED).names, EVIL]
    headers = [th.text() for th in dom.find(lambda n: n.tag == "th" and n.attrs.get("scope") == "col")]
    assert headers[1:4] == ["linux/amd64", "linux/arm64", "darwin/arm64"]

    cpu = cell(rows["cpu"], "data-platform", "linux/amd64")
    assert cpu.attrs["data-result"] == "pass" and "\u2713 pass" in cpu.text() and "x86_64" in cpu.text()
    assert "since 2026-11-27" in cpu.text()  # green since the first run shown
    assert cell(rows["cpu"], "data-platform", "linux/arm64").attrs["data-result"] == "not run"
    assert cell(rows["cpu"], "data-field", "torch").text() == "2.15.0"
    assert cell(rows["cpu"], "data-field", "size").text() == "3.14 GB"
    assert cell(rows["cpu"], "data-field", "signature").text() == "verified"
    assert cell(rows["cpu"], "data-field", "min_driver").text().startswith("none")
    # The changed version is on the grid and in the list of changes.
    assert "torch 2.14.0 \u2192 2.15.0" in rows["cpu"].text()
    (changes,) = dom.find(lambda n: n.tag == "ul" and "changes" in (n.attrs.get("class") or ""))
    assert "cpu: result" not in changes.text() and "torch 2.14.0 \u2192 2.15.0" in changes.text()

    cuda = cell(rows["cuda"], "data-platform", "linux/amd64")
    assert cuda.attrs["data-result"] == "fail" and "\u2717 FAIL" in cuda.text() and "since 2026-12-01" in cuda.text()
    assert "generate: FAILED: out of memory" in cuda.text() and "NVIDIA H100 80GB HBM3" in cuda.text()
    assert cell(rows["cuda"], "data-field", "signature").text() == "NOT verified"
    from envbuild.report import report

    # The needs the published image's labels record (the manifest), else the matrix's (as `list --compat`).
    assert cell(rows["cuda"], "data-field", "min_driver").text() == "nvidia>=580.65.06 (cuda 13.0)"
    want = next(r for r in report.compat_rows(load(FIXED)) if r["backend"] == "neuron")["min driver"]
    assert cell(rows["neuron"], "data-field", "min_driver").text() == want and "neuron >= " in want
    d = cell(rows["cuda"], "data-field", "digest")
    (button,) = d.find(lambda n: n.tag == "button")
    assert button.attrs["data-copy"] == digest("cuda2.15.09800000000") and "hidden" not in button.attrs  # the script ran
    assert d.find(lambda n: n.tag == "code")[0].text() == digest("cuda2.15.09800000000")[:19]
    assert "changed since 2026-11-30: result pass \u2192 fail; device; check generate" in rows["cuda"].text()
    assert ("cuda : result pass \u2192 fail ; device NVIDIA H200 \u2192 NVIDIA H100 80GB HBM3 ; check generate pass \u2192 FAIL"
            in changes.text())  # (text() puts a space between elements)

    rocm = rows["rocm"]
    assert "never-passed" in rocm.attrs["class"] and "never passed" in rocm.text()
    assert cell(rocm, "data-field", "signature").text() == "not recorded"
    assert not any("never passed" in rows[n].text() for n in ("cpu", "cuda"))
    assert cell(rows["xpu"], "data-platform", "linux/amd64").attrs["data-result"] == "not run"
    mps = cell(rows["mps"], "data-platform", "darwin/arm64")
    assert mps.attrs["data-result"] == "impossible" and "impossible here" in mps.text() and "Metal" in mps.text()
    assert cell(rows["mps"], "data-platform", "linux/amd64").attrs["data-result"] == "n/a"
    assert "Built 2026-12-01T03:40:00Z" in dom.text() and "2026-11-27T03:23:00Z" in dom.text()
    assert str(FIXED) in dom.text()  # the page names what it was built from


@pytest.mark.needs("chromium")
def test_hostile_values_show_as_text_not_markup(built: tuple[Path, dict[str, Any]]) -> None:
    out, data = built
    html = open_page(out / "index.html")
    dom = parse(html)
    assert "<title>envbuild: the matrix at a glance</title>" in html  # no injected script ran
    scripts = dom.find(lambda n: n.tag == "script")
    assert [s.attrs.get("src") for s in scripts] == ["site.js"]
    assert not dom.find(lambda n: n.attrs.get("id") == "inj" or "onerror" in n.attrs)
    rows = grid(dom)
    assert DESCRIPTION in rows["cpu"].text()  # the matrix's description, as text
    assert EVIL in rows and EVIL in rows[EVIL].text()
    assert cell(rows[EVIL], "data-field", "torch").text() == HOSTILE
    (link,) = rows[EVIL].find(lambda n: n.tag == "a")
    page = out / link.attrs["href"]
    assert page.parent == out / "backend" and re.fullmatch(r"[A-Za-z0-9_.-]+\.html", page.name)
    evil = open_page(page)
    assert not parse(evil).find(lambda n: n.attrs.get("id") == "inj") and HOSTILE in parse(evil).text()
    assert "&lt;script&gt;" in (out / "grid.md").read_text() and "<script>" not in (out / "grid.md").read_text()


@pytest.mark.needs("chromium")
def test_a_backend_page_has_its_checks_run_lines_pins_and_changes(built: tuple[Path, dict[str, Any]]) -> None:
    from envbuild.report import report

    out, _ = built
    m = load(FIXED, MATRIX_SET)
    dom = parse(open_page(out / "backend" / "cuda.html"))
    checks = {r.attrs["data-check"]: r.text() for r in dom.find(lambda n: n.tag == "tr" and "data-check" in n.attrs)}
    assert list(checks) == CHECKS and "\u2717 FAIL" in checks["generate"] and "\u2713 pass" in checks["device"]
    pres = [p.text() for p in dom.find(lambda n: n.tag == "pre")]
    assert pres[0] == report.run_command(m, m.backend("cuda")) and "--gpus=all" in pres[0]
    assert pres[1] == "envbuild run --backend cuda -- python train.py"
    assert pres[2].startswith("docker run --rm --init") and "--gpus=all" in pres[2]
    (changes,) = dom.find(lambda n: n.attrs.get("id") == "changes")
    assert "result pass fail" in changes.text() and "check generate pass FAIL" in changes.text()
    assert "2.15.0" in dom.text() and m.transformers in dom.text()
    imgs = [i.attrs["src"] for i in dom.find(lambda n: n.tag == "img")]
    assert imgs == ["../charts/cuda-results.svg", "../charts/cuda-duration.svg", "../charts/cuda-size.svg"]
    history = dom.find(lambda n: n.attrs.get("id") == "history")[0]
    assert len(history.find(lambda n: n.tag == "tr")) == 1 + 5
    cpu = parse(open_page(out / "backend" / "cpu.html"))
    assert "torch 2.14.0 2.15.0" in cpu.find(lambda n: n.attrs.get("id") == "changes")[0].text()
    mps = parse(open_page(out / "backend" / "mps.html"))
    assert "impossible here" in mps.text() and "envbuild env --backend mps" in mps.text()


@pytest.mark.needs("chromium")
def test_every_page_opens_without_console_errors_and_every_link_resolves(built: tuple[Path, dict[str, Any]]) -> None:
    out, _ = built
    pages = [out / "index.html", *sorted((out / "backend").glob("*.html"))]
    assert len(pages) == 1 + len(load(FIXED).names) + 1
    for page in pages:
        html = page.read_text()
        for ref in re.findall(r'(?:href|src)="([^"#]+)"', html):
            if ref.endswith("docs/index.html"):  # the docs: built into docs/ beside the site by mkdocs (nightly.yml)
                continue
            assert (page.parent / ref).resolve().is_file(), f"{page.name}: {ref} does not exist"
    for page in pages:
        open_page(page)


@pytest.mark.needs("chromium")
def test_an_error_in_the_site_s_own_script_fails_the_check(built: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    out, _ = built
    broken = Path(shutil.copytree(out, tmp_path / "broken"))
    with (broken / "site.js").open("a") as f:
        f.write("\ndocument.querySelector('#no-such-element').hidden = false;\n")
    with pytest.raises(AssertionError, match="Cannot (read|set) properties of null"):
        open_page(broken / "index.html")


def test_the_charts_are_svg_without_script(built: tuple[Path, dict[str, Any]]) -> None:
    out, _ = built
    charts = sorted((out / "charts").glob("*.svg"))
    assert len(charts) == 3 * (len(load(FIXED).containerizable()) + 1)  # and the backend only the inputs know
    for svg in charts:
        tree = ET.parse(svg)
        assert tree.getroot().tag.endswith("svg")
        assert not [e for e in tree.iter() if e.tag.endswith("script")], svg.name
    results = (out / "charts" / "cuda-results.svg").read_text()
    assert "pass" in results and "fail" in results


# Headless chromium lays a page out at least 500px wide, whatever --window-size says (a 390px screenshot is
# cropped, not narrower): at a phone's width the page is shown in an <iframe> of that width instead, whose
# viewport (and CSS media queries) is exactly that wide.
PHONE = (390, 844)
FRAME = """<!doctype html><html><head><meta charset="utf-8"><title>frame</title>
<style>body {{ margin: 0; }} iframe {{ border: 0; width: {w}px; height: {h}px; display: block; }}</style></head>
<body><iframe id="f" src="{src}"></iframe>
<script>
document.getElementById("f").addEventListener("load", function () {{
  var w = this.contentWindow, d = this.contentDocument, row = d.querySelector("table.grid tbody tr");
  document.body.setAttribute("data-measured", JSON.stringify({{scroll: d.documentElement.scrollWidth,
    row: row ? w.getComputedStyle(row).display : null, window: w.innerWidth}}));
}});
</script></body></html>"""


def framed(page: Path, width: int, height: int, measured: bool = True) -> Path:
    frame = page.with_name(f".frame-{width}-{page.name}")
    text = FRAME.format(w=width, h=height, src=page.name)
    frame.write_text(text if measured else re.sub(r"<script>.*</script>", "", text, flags=re.DOTALL))
    return frame


def measure(page: Path, width: int) -> dict[str, Any]:
    """Layout at a viewport width, as the browser computed it (--dump-dom shows no layout)."""
    frame = framed(page, width, 900)
    try:
        proc = chromium("--allow-file-access-from-files", "--dump-dom", "--window-size=1400,1000", frame.as_uri())
    finally:
        frame.unlink()
    assert proc.returncode == 0 and console_messages(proc.stderr) == [], proc.stderr[-2000:]
    (body,) = parse(proc.stdout).find(lambda n: n.tag == "body")
    return json.loads(body.attrs["data-measured"])


@pytest.mark.needs("chromium")
def test_the_grid_fits_a_phone_and_is_a_table_on_a_desktop(built: tuple[Path, dict[str, Any]]) -> None:
    out, _ = built
    phone = measure(out / "index.html", 390)
    assert phone["window"] == 390 and phone["row"] == "block"  # one card per backend
    assert phone["scroll"] <= 390, f"the page is {phone['scroll']}px wide at a phone's 390px: it scrolls sideways"
    desktop = measure(out / "index.html", 1400)
    assert desktop["row"] == "table-row"
    cuda = measure(out / "backend" / "cuda.html", 390)
    assert cuda["scroll"] <= 390, f"backend/cuda.html is {cuda['scroll']}px wide at 390px"


@pytest.mark.needs("chromium")
def test_screenshots_at_desktop_and_phone_widths(built: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    out, _ = built
    keep = Path(os.environ.get("ENVBUILD_SITE_SCREENSHOTS") or tmp_path)  # to look at them
    keep.mkdir(parents=True, exist_ok=True)
    tall = int(os.environ.get("ENVBUILD_SITE_SCREENSHOT_HEIGHT") or 0)  # the whole page, to look at
    for page in ("index.html", "backend/cuda.html"):
        name = page.replace("/", "-")
        png = keep / f"desktop-{name}.png"
        assert screenshot(out / page, png, 1400, tall or 1000) == (1400, tall or 1000)
        assert png.stat().st_size > 10_000  # not a blank page
        w, h = PHONE
        frame = framed(out / page, w, tall or h, measured=False)
        try:
            png = keep / f"phone-{name}.png"
            assert screenshot(frame, png, w, tall or h) == (w, tall or h)
        finally:
            frame.unlink()
        assert png.stat().st_size > 10_000


# --- inputs, history, output --------------------------------------------------------------------------


def test_history_runs_are_dated_folders(tmp_path: Path, inputs: dict[str, Path]) -> None:
    runs = site.load_history(inputs["history"])
    assert [r.date for r in runs] == ["2026-11-27T03:23:00Z", "2026-11-28T03:23:00Z", "2026-11-29T03:23:00Z", "2026-11-30T03:23:00Z"]
    assert set(runs[0].smoke) == {"cpu", "cuda", "rocm", EVIL} and runs[0].manifest is not None
    assert site.run_date("2026-12-01") == "2026-12-01T00:00:00Z"
    assert site.run_date("2026-02-30") is None and site.run_date("latest") is None
    bad = tmp_path / "h"
    (bad / "last-week").mkdir(parents=True)
    with pytest.raises(InvalidInput, match="'last-week' is not a run folder.*YYYY-MM-DD"):
        site.load_history(bad)
    shutil.rmtree(bad / "last-week")
    (bad / "2026-12-01").mkdir()
    (bad / "2026-12-01" / "smoke.json").write_text('{"backend": "cpu", "ok": "yes", "checks": []}')
    with pytest.raises(InvalidInput, match=r"smoke.json: not the output of `envbuild smoke --json`: \"ok\" must be bool"):
        site.load_history(bad)


def test_the_site_carries_its_history_forward(built: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    """history/ of a published site is a --history folder: the next run builds on it."""
    out, data = built
    index = json.loads((out / "history" / "index.json").read_text())
    assert [r["run"] for r in index["runs"]] == [*DATES, "2026-12-01T034000Z"]
    runs = site.load_history(out / "history")
    assert len(runs) == 5 and runs[-1].smoke["cuda"]["ok"] is False
    m = load(FIXED)
    again = site.build(m, site.Inputs(str(FIXED), history=out / "history", keep=3, now="2026-12-02T00:00:00Z"), tmp_path / "s2")
    assert [r["date"] for r in again["runs"]] == ["2026-11-29T03:23:00Z", "2026-11-30T03:23:00Z", NOW]
    assert again["latest"] == NOW
    # Its own history/ as the input, into the same folder: read whole before the new site replaces it.
    out = Path(shutil.copytree(out, tmp_path / "copy"))
    site.build(m, site.Inputs(str(FIXED), history=out / "history", now="2026-12-02T00:00:00Z"), out)
    assert [r["run"] for r in json.loads((out / "history" / "index.json").read_text())["runs"]] == [*DATES, "2026-12-01T034000Z"]
    assert site.load_history(out / "history")[-1].smoke["cuda"]["ok"] is False


def test_the_output_is_replaced_whole_and_only_when_it_is_a_site(built: tuple[Path, dict[str, Any]], tmp_path: Path,
                                                                 inputs: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    m = load(FIXED)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(InvalidInput, match="not a site envbuild wrote"):
        site.build(m, site.Inputs(str(FIXED), history=inputs["history"]), mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    out = tmp_path / "out"
    site.build(m, site.Inputs(str(FIXED), history=inputs["history"]), out)
    before = (out / "index.html").read_text()

    def broken(*a: Any, **k: Any) -> Any:
        raise OSError("disk full")

    monkeypatch.setattr(site, "markdown", broken)
    with pytest.raises(OSError):
        site.build(m, site.Inputs(str(FIXED), history=inputs["history"]), out)
    assert (out / "index.html").read_text() == before and not list(tmp_path.glob(".site-*"))


def test_changes_and_names() -> None:
    base = {"known": True, "result": "pass", "device_name": None, "versions": {"torch": "2.14.0", "plugin": None, "transformers": "5.0"},
            "size": 2e9, "digest": "sha256:" + "a" * 64, "checks": [{"name": "device", "ok": True}, {"name": "load", "ok": True}]}
    after = {**base, "result": "fail", "versions": {**base["versions"], "torch": "2.15.0"}, "size": 3e9,
             "checks": [{"name": "device", "ok": False}, {"name": "load", "ok": True}]}
    assert [(c["what"], c["before"], c["after"]) for c in site.changes(base, after)] == [
        ("result", "pass", "fail"), ("torch", "2.14.0", "2.15.0"), ("image size", "2.00 GB", "3.00 GB"),
        ("check device", "pass", "FAIL")]
    assert site.changes(base, base) == []
    assert site.slug("cuda") == "cuda" and re.fullmatch(r"_script_-[0-9a-f]{8}", site.slug("<script>"))
    assert site.slug("../x") != site.slug("__x") and "/" not in site.slug("../x")


def test_the_cli_builds_a_site_and_refuses_bad_input(inputs: dict[str, Path], tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = tmp_path / "site"
    proc = subprocess.run(["envbuild", "site", "--matrix", str(FIXED), "--manifest", str(inputs["manifest"]),
                           "--smoke-json", str(inputs["smoke"]), "--history", str(inputs["history"]), "--output", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (out / "index.html").is_file() and (out / "grid.md").read_text().startswith("### envbuild matrix status")
    bad = tmp_path / "bad"
    (bad / "yesterday").mkdir(parents=True)
    proc = subprocess.run(["envbuild", "site", "--matrix", str(FIXED), "--history", str(bad), "--output", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "'yesterday' is not a run folder" in proc.stderr and "Traceback" not in proc.stderr
    proc = subprocess.run(["envbuild", "site", "--matrix", str(FIXED), "--output", str(tmp_path / "x")],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "--manifest, --smoke-json or --history" in proc.stderr


def test_a_manifest_alone_gives_the_verdicts_it_recorded(tmp_path: Path) -> None:
    """What `envbuild publish --smoke-json` records is enough: the verdict, its failed checks, the size."""
    m = load(FIXED)
    smoke = {"ok": False, "passed": 6, "failed": 1, "failed_checks": ["cpu_match"], "error": "cpu_match: differs",
             "seconds": 51.5, "date": "2026-12-01T01:00:00Z"}
    doc = {"schema": 1, "images": {"cpu": entry("cpu", "2026-12-01T01:00:00Z", size=3_000_000_000, smoke=smoke, signed=None)}}
    (tmp_path / "m.json").write_text(json.dumps(doc))
    data = site.collect(m, site.Inputs(str(FIXED), manifest=tmp_path / "m.json", now=NOW))
    cpu = next(r for r in data["rows"] if r["backend"] == "cpu")
    assert [c["result"] for c in cpu["cells"]] == ["fail", "not run", "n/a"]
    assert cpu["cells"][0]["note"] == "cpu_match: differs" and cpu["now"]["seconds"] == 51.5
    assert cpu["now"]["checks"] == [{"name": "cpu_match", "ok": False, "message": "failed (from the manifest)"}]
    assert cpu["now"]["versions_from"] == "the manifest" and cpu["size"] == "3.00 GB" and cpu["now"]["signature"] is None
    md = site.markdown(data)
    assert "| cpu (never passed) | \u2717 FAIL |" in md and "| mps | \u2014 not a platform | \u2014 not a platform | \u2298 impossible here |" in md


def test_a_run_without_a_manifest_keeps_the_images_of_the_run_before(tmp_path: Path) -> None:
    """Nothing published since the last manifest: the same images (size, digest), not its old smoke verdict."""
    m = load(FIXED)
    smoke = {"ok": True, "passed": 8, "failed": 0, "failed_checks": [], "error": None, "seconds": 40, "date": "2026-11-30T01:00:00Z"}
    (tmp_path / "h" / "2026-11-30").mkdir(parents=True)
    (tmp_path / "h" / "2026-11-30" / "envbuild-manifest.json").write_text(json.dumps(
        {"schema": 1, "images": {"cuda": entry("cuda", "2026-11-30T01:00:00Z", size=9_000_000_000, smoke=smoke)}}))
    (tmp_path / "h" / "2026-12-01").mkdir()
    (tmp_path / "h" / "2026-12-01" / "smoke-cpu.json").write_text(json.dumps(smoke_doc("cpu", NOW, ok=True, seconds=3)))
    data = site.collect(m, site.Inputs(str(FIXED), history=tmp_path / "h", now=NOW))
    cuda = next(r for r in data["rows"] if r["backend"] == "cuda")
    assert cuda["size"] == "9.00 GB" and cuda["now"]["digest"] and [c["what"] for c in cuda["changes"]] == ["result"]
    assert [s["result"] for s in cuda["history"]] == ["pass", "not run"]  # the old verdict is not repeated


def test_a_plugin_version_the_probe_saw_is_named_by_its_package(tmp_path: Path) -> None:
    m = load(FIXED)
    b = next(b for b in m.backends if b.plugin and b.containerizable)
    doc = smoke_doc(b.name, NOW, ok=True, seconds=9)
    doc["probe"]["versions"]["plugin"] = "9.9.9"
    (tmp_path / "s.json").write_text(json.dumps(doc))
    data = site.collect(m, site.Inputs(str(FIXED), smoke=(tmp_path / "s.json",), now=NOW))
    row = next(r for r in data["rows"] if r["backend"] == b.name)
    assert row["now"]["versions"]["plugin"] == f"{b.plugin.package} 9.9.9" and row["now"]["versions_from"] == "the probe"
    assert [c["result"] for c in row["cells"]][0] == "pass" and row["size"] is None


def test_the_signature_state_is_what_publish_records_when_it_signs():
    from envbuild.report.site import signature

    signed = {"key": "3f2a9c0d11e2b4c5d6e7f8", "signatures": [{"digest": "sha256:a"}, {"digest": "sha256:b"}],
              "attestations": [{"digest": "sha256:a"}]}
    assert signature({"signed": signed}) == "signed (key 3f2a9c0d11e2b4c5…, 2 digests, 1 attested)"
    assert signature({}) is None and signature({"signed": {"signatures": []}}) is None


# --- Hostile input, round three: each case one class of attack, fixed at its root (from test_hostile_round3.py)

@pytest.mark.parametrize("smoke", [
    {"seconds": 10 ** 400}, {"seconds": float("inf")}, {"checks": [{"name": "device", "ok": True, "message": "\ud800"}]},
    {"backend": "[x](http://evil.example) <b>|"}, {"checks": "device ok"},
])
def test_the_site_takes_hostile_smoke_results_without_an_internal_error(smoke, invoke, tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    doc = {"backend": "cpu", "ok": True, "image": "x:cpu", "seconds": 1.0, "date": "2026-12-02T00:00:00Z",
           "checks": [{"name": "device", "ok": True, "message": "ok"}], **smoke}
    (results / "r.json").write_text(json.dumps(doc, allow_nan=True).replace("\\\\ud800", "\\ud800"), encoding="utf-8",
                                    errors="surrogatepass")
    result = invoke("site", "--smoke-json", results, "--output", tmp_path / "site", "--matrix", FIXED)
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 0:
        grid = (tmp_path / "site" / "grid.md").read_text()
        assert "](http://evil" not in grid and "<b>" not in grid


def test_site_output_replaces_only_a_site_it_wrote(invoke, tmp_path):
    out = tmp_path / "mine"
    (out / ".envbuild-site").mkdir(parents=True)  # a folder named like the marker is not the marker
    (out / "thesis.tex").write_text("months of work")
    result = invoke("site", "--output", out, "--matrix", FIXED)
    assert result.exit_code == 2 and (out / "thesis.tex").read_text() == "months of work"
    (out / ".envbuild-site").rmdir()
    (out / ".envbuild-site").write_text("I made this\n")  # a marker it did not write
    assert invoke("site", "--output", out, "--matrix", FIXED).exit_code == 2 and (out / "thesis.tex").exists()

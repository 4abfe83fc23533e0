"""`torchcontracts site OUT/` builds the course with Sphinx + MyST-NB: executed lessons, student labs, the ledger.

The build runs once, for lessons 00 and 01 (and lab 01), with the fixture GPU record so the ledger page shows a
CUDA column. Its pages are opened in headless chromium (tests/browser_support.py), served over HTTP, where the
browser test can run; elsewhere the same facts are read from the HTML and the search index. No page may hold
solution code or hidden checks. A course of its own (one tiny lesson) shows the execution cache at work.
"""

from __future__ import annotations

import functools
import html
import http.server
import json
import os
import re
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from torchcontracts.publish import site
from torchcontracts.publish.site_sphinx import FORBIDDEN_MARKERS, SiteError, guard, static_widget

from browser_support import Browser, missing_browser
from conftest import ROOT, lab_paths, lesson_paths, read, solution_paths
from torchcontracts import course
from torchcontracts.course import header_minutes

pytestmark = pytest.mark.slow  # executes notebooks, builds the site or drives a browser

FIXTURE = ROOT / "tests" / "fixtures" / "gpu_record.fixture.json"
LESSONS = ["00_start_here", "01_tensor_contracts"]
PAGES = [*(f"notebooks/{s}.html" for s in LESSONS), "labs/lab01_strides.html", "index.html", "ledger.html"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    cache = out.parent / "cache"
    env = {**os.environ, "TORCHCONTRACTS_GPU_RECORD": str(FIXTURE)}
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "site", str(out), "--only", "00", "01", "--cache", str(cache)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert re.fullmatch(r"site: 5 pages in .* \([\d.]+ MB\), built in \d+ s; open .*index.html", lines[-1]), lines
    assert sorted(ln.split(":")[0].strip() for ln in lines[:3]) == [
        "labs/lab01_strides",
        "notebooks/00_start_here",
        "notebooks/01_tensor_contracts",
    ], "one line per lesson or lab page"
    assert len(lines) == 5 and not proc.stderr.strip(), "quiet by default: no Sphinx log, no kernel warnings"
    assert not (out / site.CACHE).exists() and (cache / ".gitignore").is_file(), "the build cache is not published"
    return out


def test_the_site_has_the_pages_and_downloads(built):
    for rel in [
        *PAGES,
        "ledger.csv",
        "search.html",
        "searchindex.js",
        *(f"_sources/notebooks/{s}.ipynb" for s in LESSONS),
        "_sources/labs/lab01_strides.ipynb",
    ]:
        assert (built / rel).is_file(), rel
    assert not list(built.glob("**/lab0[2-9]*")), "only the labs of the lessons built"
    for stem in [*LESSONS, "lab01_strides"]:
        page = next(built.glob(f"*/{stem}.html")).read_text(encoding="utf-8")
        stamp = re.search(r'<p class="tc-stamp">(.*?)</p>', page, re.S)
        assert stamp and "Download .ipynb" in stamp[1] and "Open in Colab" in stamp[1], stem
        assert re.search(r"torch \d+\.\d+\.\d+\S* on (CPU|CUDA)", stamp[1]), stamp[1]


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("a", "link", "script", "img"):
            self.links += [v for k, v in attrs if k in ("href", "src") and v]


def test_the_index_shows_the_course_map_from_the_manifest_and_every_internal_link_resolves(built):
    page = html.unescape((built / "index.html").read_text(encoding="utf-8"))
    assert "Course map" in page
    for les in course.lessons(["00", "01"]):
        assert les.title.split(":")[-1].strip() in page and les.cuda in page, les.number
        assert f"{header_minutes(ROOT / les.notebook)} min" in page
        assert all(f'href="labs/{lab}.html"' in page for lab in les.labs), les.labs
    checked = 0
    for page_path in built.rglob("*.html"):
        if "_static" in page_path.relative_to(built).parts:  # _static: the theme's own templates
            continue
        parser = _Links()
        parser.feed(page_path.read_text(encoding="utf-8"))
        for href in parser.links:
            if href.startswith(("http:", "https:", "#", "mailto:", "data:", "javascript:")):
                continue
            target = href.split("#")[0].split("?")[0]
            assert (page_path.parent / target).resolve().exists(), f"{page_path.relative_to(built)}: broken link {href}"
            checked += 1
    assert checked > 50, checked


def test_the_ledger_page_has_every_claim_with_the_recorded_cuda_verdicts(built):
    page = (built / "ledger.html").read_text(encoding="utf-8")
    assert len(re.findall(r'<tr id="C\d{3}b?"', page)) == 124
    assert "cuda verdict" in page and "FIXTURE" in page
    assert re.search(r'<tr id="C022"><td>C022</td>.*?this build', page), "lesson 01's verdicts come from this build"
    assert re.search(r'<tr id="C019" class=differs>', page) and re.search(r'<tr id="C024" class=differs>', page)
    assert not re.search(r'<tr id="C083" class=differs>', page)
    assert (built / "ledger.csv").read_text(encoding="utf-8").count("\nC") >= 124


def _secret_lines() -> set[str]:
    """Solution and hidden-check lines of solutions/ that no student lab or lesson contains."""
    public = "\n".join(c.source for p in [*lesson_paths(), *lab_paths()] for c in read(p).cells)
    public_lines = {ln.strip() for ln in public.splitlines()}
    secret = set()
    for path in solution_paths():
        for cell in read(path).cells:
            role = (cell.metadata.get("torchcontracts") or {}).get("role", "")
            text = cell.source
            if role == "solution" and "### BEGIN SOLUTION" in text:
                text = "\n".join(re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", text, re.S))
            elif role != "hidden-check":
                continue
            secret |= {
                ln.strip() for ln in text.splitlines() if len(ln.strip()) >= 20 and not ln.strip().startswith("#")
            }
    return secret - public_lines


def test_no_page_holds_solution_code_or_hidden_checks(built):
    secret = _secret_lines()
    assert len(secret) > 10, "the solutions' secret lines were not found: the test would prove nothing"
    for page in [*built.rglob("*"), *(built.parent / "cache").rglob("*")]:  # pages, downloads, the build's sources
        if page.suffix not in (".html", ".ipynb", ".csv", ".js", ".md", ".json") or "_static" in page.parts:
            continue
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
        leaked = [m for m in FORBIDDEN_MARKERS if m in text] + [ln for ln in secret if ln in text]
        assert not leaked, f"{page} shows solution or hidden-check code: {leaked[:3]}"


def test_the_guard_refuses_a_solution_notebook():
    with pytest.raises(SiteError, match="never solutions"):
        guard(read(ROOT / "solutions" / "lab01_strides.ipynb"), "solutions/lab01_strides.ipynb")
    guard(read(ROOT / "labs" / "lab01_strides.ipynb"), "labs/lab01_strides.ipynb")  # the student lab is fine


def _serve(folder: Path):
    handler = functools.partial(_QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


_JS_PAGE = """() => ({
  images: document.images.length,
  broken: [...document.images].filter(i => !(i.naturalWidth > 0)).length,
  outputs: document.querySelectorAll('.cell_output').length,
  widgets: document.querySelectorAll('.tc-static-widget').length,
  widgetImages: document.querySelectorAll('.tc-static-widget img').length,
  next: (document.querySelector('a.right-next') || {}).href || '',
  tableLinks: [...document.querySelectorAll('article table a')].map(a => a.getAttribute('href')),
  text: document.body.innerText })"""


def _checks_in_chromium(built: Path) -> dict:
    server, base = _serve(built)
    browser = Browser()
    found: dict = {}
    try:
        context = browser.browser.new_context(viewport={"width": 1300, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)[:200]))
        page.on(  # a page, picture, script or style sheet of the site that does not load: a broken internal link
            "response",
            lambda r: (
                errors.append(f"{r.status} {r.url}")
                if r.status >= 400 and r.url.startswith(base) and not r.url.endswith("favicon.ico")
                else None
            ),
        )
        for rel in PAGES:
            page.goto(base + rel, wait_until="load", timeout=60_000)
            page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30_000)
            found[rel] = page.evaluate(_JS_PAGE)
        page.goto(base + f"notebooks/{LESSONS[0]}.html", wait_until="load")
        page.click("a.right-next")
        page.wait_for_load_state("load")
        found["_next"] = page.url
        page.goto(base + "search.html?q=stride", wait_until="load")
        page.wait_for_selector("#search-results li a", timeout=30_000)
        found["_search"] = page.eval_on_selector_all("#search-results li a", "a => a.map(e => e.getAttribute('href'))")
        found["_errors"] = errors
        context.close()
    finally:
        leaked = browser.close()
        server.shutdown()
    assert not leaked, leaked
    return found


def _checks_from_html(built: Path) -> dict:
    found: dict = {}
    for rel in PAGES:
        text = (built / rel).read_text(encoding="utf-8")
        nxt = re.search(r'<a class="right-next"\s+href="([^"]+)"', text)
        found[rel] = {
            "images": len(re.findall(r"<img ", text)),
            "broken": len(re.findall(r'<img [^>]*src=""', text)),
            "outputs": len(re.findall(r'class="cell_output', text)),
            "widgets": text.count('class="tc-static-widget"'),
            "widgetImages": len(re.findall(r'class="tc-static-widget".*?<img ', text, re.S)),
            "next": nxt[1] if nxt else "",
            "tableLinks": re.findall(r'<a [^>]*href="([^"]+)"', "".join(re.findall(r"<table.*?</table>", text, re.S))),
            "text": html.unescape(re.sub(r"<[^>]+>", " ", text)),
        }
    found["_next"] = found[f"notebooks/{LESSONS[0]}.html"]["next"]
    index = json.loads(re.search(r"Search\.setIndex\((.*)\)\s*$", (built / "searchindex.js").read_text())[1])
    docs = [index["docnames"][i] for stem in ("stride", "strid") for i in _as_list(index["terms"].get(stem))]
    found["_search"] = [f"{d}.html" for d in docs]
    found["_errors"] = []
    return found


def _as_list(value) -> list[int]:
    return [] if value is None else [value] if isinstance(value, int) else list(value)


def test_the_pages_render_in_a_browser_search_finds_lesson_01_and_next_leads_on(built):
    why = missing_browser()
    if why and os.environ.get("TC_REQUIRE_BROWSER"):
        pytest.fail(why)
    found = _checks_from_html(built) if why else _checks_in_chromium(built)
    for stem in LESSONS:
        p = found[f"notebooks/{stem}.html"]
        assert p["outputs"] >= 5 and p["broken"] == 0, (stem, {k: v for k, v in p.items() if k != "text"})
        assert "Traceback (most recent call last)" not in p["text"] and "Error displaying widget" not in p["text"]
        assert "VERDICT" in p["text"] or stem == "00_start_here"
        assert p["images"] - p["widgetImages"] >= 1, (stem, "its plots")
    lesson01 = found["notebooks/01_tensor_contracts.html"]
    assert lesson01["images"] >= 1 and lesson01["widgets"] >= 1 and lesson01["widgetImages"] >= 1, (
        "the explorer's picture"
    )
    assert found["_next"].endswith("notebooks/01_tensor_contracts.html"), found["_next"]
    assert any("01_tensor_contracts" in h for h in found["_search"]), found["_search"]
    lab = found["labs/lab01_strides.html"]
    assert "NotImplementedError" in lab["text"] and "BEGIN SOLUTION" not in lab["text"]
    assert "Course map" in found["index.html"]["text"] and "claims ledger" in found["ledger.html"]["text"]
    links = found["index.html"]["tableLinks"]
    assert [f"notebooks/{s}.html" for s in LESSONS] + ["labs/lab01_strides.html"] == [
        h for h in links if h.startswith(("notebooks/", "labs/"))
    ], links
    assert not found["_errors"], found["_errors"]


def test_static_widget_draws_the_last_state_of_controls_pictures_and_html():
    meta = {
        "widgets": {
            "application/vnd.jupyter.widget-state+json": {
                "version_major": 2,
                "version_minor": 0,
                "state": {
                    "box": {
                        "model_name": "VBoxModel",
                        "state": {"children": ["IPY_MODEL_dd", "IPY_MODEL_img", "IPY_MODEL_h"]},
                    },
                    "dd": {
                        "model_name": "DropdownModel",
                        "state": {"description": "verdict", "index": 1, "_options_labels": ["(all)", "false"]},
                    },
                    "img": {
                        "model_name": "ImageModel",
                        "state": {"format": "png"},
                        "buffers": [{"path": ["value"], "data": "iVBORw0KGgo=", "encoding": "base64"}],
                    },
                    "h": {"model_name": "HTMLModel", "state": {"value": "<b>28 claims</b>"}},
                },
            }
        }
    }
    page = static_widget({"model_id": "box"}, meta)
    assert "verdict: <b>false</b>" in page and 'src="data:image/png;base64,iVBORw0KGgo="' in page
    assert "<b>28 claims</b>" in page and "last state" in page
    assert "was not saved" in static_widget({"model_id": "gone"}, meta)


def test_the_site_never_writes_into_the_course_or_a_foreign_folder(tmp_path):
    for bad in (ROOT, ROOT / "labs", ROOT.parent):
        with pytest.raises(SiteError, match="the course or one of its folders"):
            site.build_site(ROOT, bad, progress=False)
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(SiteError, match="not empty"):
        site.build_site(ROOT, foreign, progress=False)
    assert (foreign / "notes.txt").read_text() == "keep me"
    with pytest.raises(SiteError, match="would be published"):
        site.build_site(ROOT, tmp_path / "out", progress=False, cache=tmp_path / "out" / "cache")


def _tiny_course(root: Path, code: str, prose: str = "A tiny lesson.") -> course.Lesson:
    (root / "notebooks").mkdir(parents=True, exist_ok=True)
    (root / "labs").mkdir(exist_ok=True)
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell(f"# 00 · Tiny\\n**Time:** 5 minutes.\\n\\n{prose}"),
            nbformat.v4.new_code_cell(code),
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks" / "00_tiny.ipynb")
    return course.Lesson("00", "tiny", "Tiny", "l00_tiny")  # a course of its own, not the manifest's


def test_a_failing_lesson_stops_the_build_in_one_line(tmp_path):
    broken = _tiny_course(tmp_path / "course", "raise ValueError('deliberately broken')")
    with pytest.raises(SiteError, match=r"00_tiny.ipynb cell 2: ValueError: deliberately broken") as err:
        site.build_site(tmp_path / "course", tmp_path / "out", progress=False, cell_timeout=60, lessons=[broken])
    assert "\n" not in str(err.value) and "Traceback" not in str(err.value)


def test_a_rebuild_executes_only_a_lesson_whose_code_or_package_changed(tmp_path):
    root, out = tmp_path / "course", tmp_path / "out"
    tiny = _tiny_course(root, "print(6 * 7)")
    build = functools.partial(site.build_site, root, out, progress=False, cell_timeout=60, lessons=[tiny])
    assert build().lesson_seconds["00_tiny.ipynb"] is not None, "the first build executes"
    _tiny_course(root, "print(6 * 7)", prose="The prose changed, the code did not.")
    assert build().lesson_seconds["00_tiny.ipynb"] is None, "a prose edit is served from the cache"
    assert "The prose changed" in (out / "notebooks" / "00_tiny.html").read_text(encoding="utf-8")
    _tiny_course(root, "print(6 * 8)")
    assert build().lesson_seconds["00_tiny.ipynb"] is not None, "a code edit executes again"
    assert "48" in (out / "notebooks" / "00_tiny.html").read_text(encoding="utf-8")
    assert build().lesson_seconds["00_tiny.ipynb"] is None, "nothing changed: from the cache"
    helper = root / "helpers" / "torchcontracts" / "lessons" / "l00_tiny" / "tiny.py"
    helper.parent.mkdir(parents=True)
    helper.write_text("ANSWER = 48\n")
    assert build().lesson_seconds["00_tiny.ipynb"] is not None, "a change in the lesson's package executes again"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["course", "out"], "nothing is written beside OUT"
    assert (root / site.CACHE).is_dir() and not (out / site.CACHE).exists(), "the cache is in the course, not OUT"

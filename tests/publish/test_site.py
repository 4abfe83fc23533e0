"""`torchcontracts site OUT/` builds a static course: executed lessons, student labs, an index and the ledger.

The build runs once, for lessons 00 and 01 (and lab 01), with the fixture GPU record so the ledger page shows a
CUDA column. Its pages are opened in headless chromium (tests/browser_support.py) where the browser test can
run; elsewhere the same checks read the HTML. No page may hold solution code or hidden checks.
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from torchcontracts.publish import site
from torchcontracts.publish.site_render import FORBIDDEN_MARKERS, SiteError, guard, static_widgets

from browser_support import Browser, missing_browser
from conftest import ROOT, lab_paths, lesson_paths, read, solution_paths
from torchcontracts import course
from torchcontracts.course import header_minutes as readme_parser_minutes

pytestmark = pytest.mark.slow  # executes notebooks, grades whole submissions or drives a browser

FIXTURE = ROOT / "tests" / "fixtures" / "gpu_record.fixture.json"
LESSONS = ["00_start_here", "01_tensor_contracts"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "TORCHCONTRACTS_GPU_RECORD": str(FIXTURE)}
    proc = subprocess.run(
        [sys.executable, "-m", "torchcontracts", "site", str(out), "--only", "00", "01", "--quiet"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"site: 5 pages in .* \([\d.]+ MB\), built in \d+ s", proc.stdout), proc.stdout
    return out


def test_the_site_has_the_pages_and_downloads(built):
    for rel in [
        "index.html",
        "ledger.html",
        "ledger.csv",
        *(f"lessons/{s}.html" for s in LESSONS),
        *(f"lessons/{s}.ipynb" for s in LESSONS),
        "labs/lab01_strides.html",
        "labs/lab01_strides.ipynb",
    ]:
        assert (built / rel).is_file(), rel
    assert not list(built.glob("**/lab0[2-9]*")), "only the labs of the lessons built"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links += [v for k, v in attrs if k == "href" and v]


def test_the_index_shows_the_course_map_with_the_headers_times_and_every_link_resolves(built):
    page = (built / "index.html").read_text(encoding="utf-8")
    rows = re.findall(r"<tr><td>(\d\d)</td>.*?<td class=\"minutes\">([\d-]+) min</td>", page)
    assert [n for n, _ in rows] == ["00", "01"]
    for (number, minutes), stem in zip(rows, LESSONS):
        assert minutes == readme_parser_minutes(ROOT / "notebooks" / f"{stem}.ipynb")
    assert f"{readme_parser_minutes(ROOT / 'labs' / 'lab01_strides.ipynb')} min" in page
    for page_path in built.rglob("*.html"):
        parser = _Links()
        parser.feed(page_path.read_text(encoding="utf-8"))
        for href in parser.links:
            if href.startswith(("http", "#", "mailto:")):
                continue
            assert (page_path.parent / href.split("#")[0]).resolve().exists(), f"{page_path.name}: broken link {href}"


def test_the_ledger_page_has_every_claim_with_the_recorded_cuda_verdicts(built):
    page = (built / "ledger.html").read_text(encoding="utf-8")
    assert len(re.findall(r'<tr id="C\d{3}b?"', page)) == 124
    assert "cuda verdict" in page and "FIXTURE" in page
    assert re.search(r'<tr id="C022"><td>C022</td>.*?this build', page), "lesson 01's verdicts come from this build"
    assert re.search(r'<tr id="C019" class=differs>', page) and re.search(r'<tr id="C024" class=differs>', page)
    assert not re.search(r'<tr id="C083" class=differs>', page)


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
    for page in built.rglob("*"):
        if page.suffix not in (".html", ".ipynb", ".csv"):
            continue
        text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))
        leaked = [m for m in FORBIDDEN_MARKERS if m in text] + [ln for ln in secret if ln in text]
        assert not leaked, f"{page.relative_to(built)} shows solution or hidden-check code: {leaked[:3]}"


def test_the_guard_refuses_a_solution_notebook():
    with pytest.raises(SiteError, match="never solutions"):
        guard(read(ROOT / "solutions" / "lab01_strides.ipynb"), "solutions/lab01_strides.ipynb")
    guard(read(ROOT / "labs" / "lab01_strides.ipynb"), "labs/lab01_strides.ipynb")  # the student lab is fine


def _page_checks_in_chromium(built: Path) -> dict[str, dict]:
    browser = Browser()
    found = {}
    try:
        context = browser.browser.new_context(viewport={"width": 1300, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)[:200]))
        for rel in [*(f"lessons/{s}.html" for s in LESSONS), "labs/lab01_strides.html", "index.html", "ledger.html"]:
            page.goto((built / rel).as_uri(), wait_until="domcontentloaded", timeout=60_000)
            page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=30_000)
            found[rel] = page.evaluate("""() => ({
              outputs: document.querySelectorAll('.jp-OutputArea-output').length,
              images: document.images.length,
              broken: [...document.images].filter(i => !(i.naturalWidth > 0)).length,
              widgets: document.querySelectorAll('.tc-static-widget').length,
              widgetImages: document.querySelectorAll('.tc-static-widget img').length,
              stderr: [...document.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')]
                        .map(e => e.textContent).join('\\n'),
              text: document.body.innerText })""")
        found["_errors"] = {"errors": errors}
        context.close()
    finally:
        leaked = browser.close()
    assert not leaked, leaked
    return found


def _page_checks_from_html(built: Path) -> dict[str, dict]:
    found = {}
    for rel in [*(f"lessons/{s}.html" for s in LESSONS), "labs/lab01_strides.html", "index.html", "ledger.html"]:
        text = (built / rel).read_text(encoding="utf-8")
        found[rel] = {
            "outputs": len(re.findall(r'class="[^"]*jp-OutputArea-output', text)),
            "images": len(re.findall(r"<img ", text)),
            "broken": len(re.findall(r'<img [^>]*src=""', text)),
            "widgets": text.count('class="tc-static-widget"'),
            "widgetImages": len(re.findall(r'class="tc-static-widget".*?<img ', text, re.S)),
            "stderr": "\n".join(re.findall(r'data-mime-type="application/vnd.jupyter.stderr">(.*?)</div>', text, re.S)),
            "text": html.unescape(re.sub(r"<[^>]+>", " ", text)),
        }
    found["_errors"] = {"errors": []}
    return found


def test_the_pages_render_with_outputs_and_pictures_and_no_errors(built):
    why = missing_browser()
    found = _page_checks_from_html(built) if why else _page_checks_in_chromium(built)
    for stem in LESSONS:
        p = found[f"lessons/{stem}.html"]
        assert p["outputs"] >= 5 and p["images"] >= 1 and p["broken"] == 0, (
            stem,
            {k: v for k, v in p.items() if k != "text"},
        )
        assert "Traceback (most recent call last)" not in p["text"] and "-" * 75 not in p["stderr"], stem
        assert not re.search(r"\b\w+Error\b", p["stderr"]), (stem, p["stderr"][:300])
        assert "VERDICT" in p["text"] or stem == "00_start_here"
    lesson01 = found["lessons/01_tensor_contracts.html"]
    assert lesson01["widgets"] >= 1 and lesson01["widgetImages"] >= 1, "the stride explorer shows its last picture"
    lab = found["labs/lab01_strides.html"]
    assert "NotImplementedError" in lab["text"] and "BEGIN SOLUTION" not in lab["text"]
    assert "Course map" in found["index.html"]["text"] and "claims ledger" in found["ledger.html"]["text"]
    assert not found["_errors"]["errors"], found["_errors"]


def test_static_widgets_draw_the_last_state_of_controls_pictures_and_html():
    nb = nbformat.v4.new_notebook()
    nb.metadata["widgets"] = {
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
    out = nbformat.v4.new_output(
        "display_data",
        data={"application/vnd.jupyter.widget-view+json": {"model_id": "box"}, "text/plain": "VBox(...)"},
    )
    nb.cells = [nbformat.v4.new_code_cell("box", outputs=[out])]
    assert static_widgets(nb) == 1 and "widgets" not in nb.metadata
    page = nb.cells[0].outputs[0]["data"]["text/html"]
    assert "verdict: <b>false</b>" in page and 'src="data:image/png;base64,iVBORw0KGgo="' in page
    assert "<b>28 claims</b>" in page and "last state" in page


def test_the_course_map_reads_titles_cuda_and_labs_from_the_manifest(built):
    page = html.unescape((built / "index.html").read_text(encoding="utf-8"))
    for les in course.lessons(["00", "01"]):
        assert les.title in page and les.cuda in page, les.number
        assert all(f"{lab}.html" in page for lab in les.labs), les.labs
    assert course.lesson_of_lab("lab01_strides").number == "01"


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


def test_a_failing_lesson_stops_the_build_in_one_line(tmp_path):
    root = tmp_path / "course"
    (root / "notebooks").mkdir(parents=True)
    (root / "labs").mkdir()
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_markdown_cell("# 00 · Broken\n**Time:** 5 minutes."),
            nbformat.v4.new_code_cell("raise ValueError('deliberately broken')"),
        ]
    )
    nbformat.write(nb, root / "notebooks" / "00_broken.ipynb")
    broken = course.Lesson("00", "broken", "Broken", "l00_broken")  # a course of its own, not the manifest's
    with pytest.raises(SiteError, match=r"00_broken.ipynb cell 2: ValueError: deliberately broken"):
        site.build_site(root, tmp_path / "out", progress=False, cell_timeout=60, lessons=[broken])

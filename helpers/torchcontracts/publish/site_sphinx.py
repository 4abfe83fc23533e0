"""The glue between the course and Sphinx + MyST-NB for `torchcontracts site` (``publish.site`` writes the conf.py).

Two pieces, both loaded by the generated ``conf.py``:

- :class:`Renderer`, MyST-NB's notebook renderer (``nb_render_plugin = "torchcontracts"``, an entry point of the
  package) with three changes: a widget is drawn as static HTML from the state the executed notebook stored (images
  as images, controls as "label: value"), never as a script that needs a widget manager from a CDN; the profiler's
  own start/stop lines leave stderr; the first error output of a lesson is noted so the build stops in one line.
- :func:`setup`, a Sphinx extension: each lesson executes with ``TORCHCONTRACTS_LEDGER`` set, so its verdicts are
  kept per lesson (and kept across builds while MyST-NB's cache serves the lesson); each lesson and lab page gets a
  line with "Download .ipynb", "Open in Colab" and "verified with torch X on CPU, date"; the ledger page's table is
  filled in once every lesson has been read; ``report.json`` says what ran and how long.

:func:`guard` refuses any notebook that holds solution or hidden-check cells, so a solution never reaches a page.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

from torchcontracts.labs.format import BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, END_SOLUTION

__all__ = ["FORBIDDEN_MARKERS", "SiteError", "WIDGET_NOTE", "guard", "static_widget", "strip_noise"]

WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
FORBIDDEN_MARKERS = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN)  # the lab format's own markers
WIDGET_NOTE = "interactive widget, shown in its last state: run the notebook to use it"
LEDGER_SLOT = "<!-- torchcontracts: the ledger table -->"
_NOISE = re.compile(r"^USDT:.*SyncActivityProfilerHandler\.cpp:\d+\] profiler_(start|stop)\n?", re.M)
_BOXES = {
    "VBoxModel": "column",
    "BoxModel": "column",
    "GridBoxModel": "row",
    "HBoxModel": "row",
    "AccordionModel": "column",
    "TabModel": "column",
    "StackModel": "column",
}
_CHOICE = {"DropdownModel", "SelectModel", "RadioButtonsModel", "ToggleButtonsModel", "SelectionSliderModel"}
_VALUE = {
    "IntSliderModel",
    "FloatSliderModel",
    "FloatLogSliderModel",
    "IntTextModel",
    "FloatTextModel",
    "BoundedIntTextModel",
    "BoundedFloatTextModel",
    "TextModel",
    "TextareaModel",
    "IntProgressModel",
    "FloatProgressModel",
    "IntRangeSliderModel",
    "FloatRangeSliderModel",
    "DatePickerModel",
    "ColorPickerModel",
}


class SiteError(RuntimeError):
    """A page that must not be published (a failing lesson, a solution cell); the message says which and why."""


def guard(nb: Any, name: str) -> None:
    """Raise :class:`SiteError` when ``nb`` holds solution code or hidden checks (only labs/ may be published)."""
    for i, cell in enumerate(nb.cells, 1):
        role = (cell.get("metadata", {}).get("torchcontracts") or {}).get("role", "")
        marker = next((m for m in FORBIDDEN_MARKERS if m in cell.source), None)
        if role == "hidden-check" or marker:
            raise SiteError(
                f"site: {name} cell {i} holds {marker or 'a hidden check'}: publish labs/ "
                "(built by `torchcontracts labs build`), never solutions/"
            )


def strip_noise(text: str) -> str:
    """Drop the profiler's own start/stop lines (kineto writes them to stderr); they say nothing to a reader."""
    return _NOISE.sub("", text)


_CSS = """
.tc-stamp{font-size:.9em;color:#556;border-left:3px solid #8ab;padding-left:8px}
.tc-static-widget{border:1px solid #ccd;border-radius:4px;padding:6px;margin:4px 0;background:#fafbff}
.tc-w-box{display:flex;gap:8px;flex-wrap:wrap}.tc-w-column{flex-direction:column}.tc-w-row{flex-direction:row}
.tc-w-control{font:13px sans-serif;padding:2px 6px;border:1px solid #ddd;border-radius:3px;background:#fff}
.tc-w-image{max-width:100%}.tc-w-note{font:italic 12px sans-serif;color:#667;margin-top:4px}
.tc-ledger{overflow-x:auto}.tc-ledger table{font-size:12px}.tc-ledger td,.tc-ledger th{vertical-align:top}
.v-true{background:#e3f4e3}.v-false{background:#fbe1e1}.v-partly{background:#fdf3d6}
.v-outdated{background:#ece3f7}.v-gpu-only{background:#e0eefb}.v-not-covered{color:#999}.differs{outline:2px solid #d33}
"""


# -- widgets: static HTML from the stored state -----------------------------------------------------------------
def _ref(value: Any) -> str:
    return value[len("IPY_MODEL_") :] if isinstance(value, str) and value.startswith("IPY_MODEL_") else ""


def _render_outputs(outputs: list[dict[str, Any]]) -> str:
    parts = []
    for out in outputs:
        data = out.get("data", {})
        if out.get("output_type") == "stream":
            parts.append(f"<pre>{html.escape(out.get('text', ''))}</pre>")
        elif "image/png" in data:
            parts.append(f'<img alt="figure" src="data:image/png;base64,{data["image/png"]}">')
        elif "text/html" in data:
            parts.append(data["text/html"])
        elif "text/plain" in data:
            parts.append(f"<pre>{html.escape(data['text/plain'])}</pre>")
    return "".join(parts)


def _render(mid: str, models: dict[str, Any], depth: int = 0) -> str:
    """Static HTML for one widget model and its children, from the stored widget state."""
    model = models.get(mid)
    if model is None or depth > 20:
        return ""
    name, st = model.get("model_name", ""), model.get("state", {})
    desc = html.escape(str(st.get("description", "") or ""))
    lead = f"{desc}: " if desc else ""
    if name in _BOXES:
        kids = "".join(_render(_ref(c), models, depth + 1) for c in st.get("children", []))
        return f'<div class="tc-w-box tc-w-{_BOXES[name]}">{kids}</div>'
    if name == "ImageModel":
        buf = next((b for b in model.get("buffers", []) if b.get("path") == ["value"]), None)
        if buf is None:
            return '<span class="tc-w-control">(empty image)</span>'
        fmt = html.escape(str(st.get("format", "png")))
        return f'<img class="tc-w-image" alt="widget picture" src="data:image/{fmt};base64,{buf["data"]}">'
    if name in ("HTMLModel", "HTMLMathModel"):
        return f'<div class="tc-w-html">{lead}{st.get("value", "")}</div>'
    if name == "LabelModel":
        return f'<span class="tc-w-control">{html.escape(str(st.get("value", "")))}</span>'
    if name in _CHOICE or name == "SelectMultipleModel":
        labels = st.get("_options_labels", [])
        index = st.get("index")
        picked = [index] if isinstance(index, int) else list(index or [])
        shown = ", ".join(html.escape(str(labels[i])) for i in picked if 0 <= i < len(labels)) or "none"
        return f'<span class="tc-w-control">{lead}<b>{shown}</b></span>'
    if name in _VALUE:
        return f'<span class="tc-w-control">{lead}<b>{html.escape(str(st.get("value", "")))}</b></span>'
    if name in ("CheckboxModel", "ToggleButtonModel"):
        return f'<span class="tc-w-control">{lead}<b>{"on" if st.get("value") else "off"}</b></span>'
    if name == "ButtonModel":
        return f'<button class="tc-w-control" disabled>{desc or "button"}</button>'
    if name == "OutputModel":
        return f'<div class="tc-w-output">{_render_outputs(st.get("outputs", []))}</div>'
    return f'<span class="tc-w-control">({html.escape(name.removesuffix("Model"))} widget)</span>'


def static_widget(view: dict[str, Any], nb_metadata: dict[str, Any]) -> str:
    """One widget view (its ``model_id``) as static HTML of its last state, from the notebook's stored widget state."""
    models = ((nb_metadata.get("widgets") or {}).get(WIDGET_STATE) or {}).get("state", {})
    body = _render(view.get("model_id", ""), models) or "<i>(the widget's state was not saved)</i>"
    return f'<div class="tc-static-widget">{body}<div class="tc-w-note">{WIDGET_NOTE}</div></div>'


# -- MyST-NB's renderer, with static widgets ----------------------------------------------------------------------
try:
    from docutils import nodes
    from myst_nb.core.render import MimeData, NbElementRenderer
except ImportError:  # the site's extra is not installed: the guard and the widget drawing still import
    NbElementRenderer = object  # type: ignore[assignment,misc]


class Renderer(NbElementRenderer):  # type: ignore[misc,valid-type]
    """MyST-NB's renderer with widgets drawn from their stored state and no widget scripts from a CDN."""

    def render_widget_view(self, data: MimeData) -> list[Any]:
        view = data.content if isinstance(data.content, dict) else json.loads(data.string)
        meta = self.renderer.nb_client.notebook.get("metadata", {})
        return [nodes.raw(text=static_widget(view, meta), format="html")]

    def render_nb_finalise(self, metadata: dict) -> None:  # no widget-state script, no widget manager to fetch
        pass

    def render_stderr(self, output: Any, cell_metadata: dict, cell_index: int, source_line: int) -> list[Any]:
        text = strip_noise(output.get("text", ""))
        if not text.strip():
            return []
        return super().render_stderr({**output, "text": text}, cell_metadata, cell_index, source_line)

    def render_error(self, output: Any, cell_metadata: dict, cell_index: int, source_line: int) -> list[Any]:
        env = self.renderer.sphinx_env
        if env is not None:
            lines = [ln.strip() for ln in str(output.get("evalue", "")).splitlines() if ln.strip()]
            errors = env.tc_errors if hasattr(env, "tc_errors") else {}
            errors.setdefault(
                env.docname,
                f"{Path(env.doc2path(env.docname)).name} cell {cell_index + 1}: {output.get('ename', 'error')}: "
                f"{lines[-1][:300] if lines else ''}",
            )
            env.tc_errors = errors
        return super().render_error(output, cell_metadata, cell_index, source_line)


# -- the Sphinx extension -------------------------------------------------------------------------------------------
def _work(app: Any) -> Path:
    return Path(app.config.tc_work)


def _keep_outputs_in_work(app: Any) -> None:
    """MyST-NB writes executed notebooks and pictures to OUT/../jupyter_execute: keep them in the build cache."""
    app.env.mystnb_config = app.env.mystnb_config.copy(output_folder=str(_work(app) / "jupyter_execute"))


def _source_read(app: Any, docname: str, source: list[str]) -> None:
    """Before a lesson executes (if it does): its verdicts go to a fresh file of its own."""
    from torchcontracts.core.claims import LEDGER_ENV

    if docname in app.config.tc_lessons:
        fresh = _work(app) / "verdicts" / f"{Path(docname).name}.new.jsonl"
        fresh.parent.mkdir(parents=True, exist_ok=True)
        fresh.unlink(missing_ok=True)
        os.environ[LEDGER_ENV] = str(fresh)
    else:
        os.environ.pop(LEDGER_ENV, None)


def _stamp_line(app: Any, docname: str, executed: float | None) -> Any:
    """The paragraph under a notebook page's title: Download .ipynb, Open in Colab, what verified it and when."""
    up = "../" * docname.count("/")
    repo = app.config.tc_repo
    m = re.match(r"https?://github\.com/([^/]+)/([^/.]+)", repo or "")
    if m:
        colab = f"https://colab.research.google.com/github/{m[1]}/{m[2]}/blob/{app.config.tc_branch}/{docname}.ipynb"
        colab_note = ""
    else:
        colab = "https://colab.research.google.com/"
        colab_note = " (upload the .ipynb; lesson 00's first cell installs the course there)"
    para = nodes.paragraph(classes=["tc-stamp"])
    para += nodes.reference("", "Download .ipynb", refuri=f"{up}_sources/{docname}.ipynb", classes=["tc-download"])
    para += nodes.Text(" · ")
    para += nodes.reference("", "Open in Colab", refuri=colab, classes=["tc-colab"])
    para += nodes.Text(colab_note + " · ")
    if executed is not None:
        day = time.strftime("%Y-%m-%d", time.localtime(executed))
        para += nodes.Text(f"verified with torch {app.config.tc_torch} on {app.config.tc_device.upper()}, {day}")
    else:
        para += nodes.Text(
            f"a student lab, shown as handed out (not executed); the course was verified with torch "
            f"{app.config.tc_torch} on {app.config.tc_device.upper()}"
        )
    return para


def _doctree_read(app: Any, doctree: Any) -> None:
    env = app.env
    docname = env.docname
    if docname not in app.config.tc_lessons and docname not in app.config.tc_labs:
        return
    failed = getattr(env, "tc_errors", {}).get(docname)
    exec_data = (getattr(env, "nb_metadata", {}) or {}).get(docname, {}).get("exec_data") or {}
    if docname in app.config.tc_lessons:
        if not failed and exec_data and not exec_data.get("succeeded", True):
            failed = f"{Path(docname).name}.ipynb: {exec_data.get('error') or 'execution failed'}"
        if failed:
            (_work(app) / "failed.txt").write_text(failed, encoding="utf-8")
            raise SiteError(f"site: {failed}: fix the lesson (or leave it out with --only) and build again")
        verdicts = _work(app) / "verdicts"
        fresh, kept = verdicts / f"{Path(docname).name}.new.jsonl", verdicts / f"{Path(docname).name}.jsonl"
        if exec_data.get("mtime", 0) >= app.config.tc_started:  # executed in this build, not read from the cache
            kept.write_text(fresh.read_text(encoding="utf-8") if fresh.exists() else "", encoding="utf-8")
            runs = app.tc_runs if hasattr(app, "tc_runs") else {}
            runs[docname] = exec_data.get("runtime")
            app.tc_runs = runs
        fresh.unlink(missing_ok=True)
    executed = exec_data.get("mtime") if docname in app.config.tc_lessons else None
    if app.config.tc_progress:
        runs = getattr(app, "tc_runs", {})
        how = "a lab, not executed" if docname in app.config.tc_labs else "served from the execution cache"
        how = f"executed in {runs[docname] or 0:.1f} s" if docname in runs else how
        print(f"  {docname}: {how}", flush=True)
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is not None:
        section.insert(1, _stamp_line(app, docname, executed))


def _always_reread(app: Any, env: Any, added: set, changed: set, removed: set) -> list[str]:
    return ["ledger"] if "ledger" in env.found_docs else []


def _records(app: Any) -> dict[str, dict[str, str]]:
    records: dict[str, dict[str, str]] = {}
    for docname in app.config.tc_lessons:
        path = _work(app) / "verdicts" / f"{Path(docname).name}.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
            rec = json.loads(line)
            records[rec["id"]] = {**rec, "notebook": f"{Path(docname).name}.ipynb"}
    return records


def _doctree_resolved(app: Any, doctree: Any, docname: str) -> None:
    if docname != "ledger":
        return
    from torchcontracts.publish.site import ledger_html

    built = {f"{Path(d).name}.ipynb" for d in app.config.tc_lessons}
    table, csv_text = ledger_html(_records(app), built)
    for raw in doctree.findall(nodes.raw):
        if LEDGER_SLOT in raw.astext():
            raw.replace_self(nodes.raw(text=table, format="html"))
    Path(app.outdir).mkdir(parents=True, exist_ok=True)
    (Path(app.outdir) / "ledger.csv").write_text(csv_text, encoding="utf-8")


def _build_finished(app: Any, exception: BaseException | None) -> None:
    if exception is not None:
        return
    (Path(app.outdir) / "_static").mkdir(parents=True, exist_ok=True)
    (Path(app.outdir) / "_static" / "torchcontracts.css").write_text(_CSS, encoding="utf-8")
    env = app.env
    lessons = {}
    for docname in app.config.tc_lessons:
        data = (getattr(env, "nb_metadata", {}) or {}).get(docname, {}).get("exec_data") or {}
        ran = getattr(app, "tc_runs", {}).get(docname)
        lessons[f"{Path(docname).name}.ipynb"] = {
            "seconds": data.get("runtime"),
            "executed": ran is not None,
            "when": data.get("mtime"),
        }
    (_work(app) / "report.json").write_text(json.dumps({"lessons": lessons}, indent=1), encoding="utf-8")
    shutil.rmtree(Path(app.outdir) / "reports", ignore_errors=True)
    for source_map in (Path(app.outdir) / "_static").rglob("*.map"):  # the theme's source maps: 3 MB no reader uses
        source_map.unlink()


def setup(app: Any) -> dict[str, Any]:
    for name, default in [
        ("tc_work", ""),
        ("tc_lessons", []),
        ("tc_labs", []),
        ("tc_repo", ""),
        ("tc_branch", "main"),
        ("tc_torch", ""),
        ("tc_device", "cpu"),
        ("tc_started", 0.0),
        ("tc_progress", True),
    ]:
        app.add_config_value(name, default, "env" if name in ("tc_lessons", "tc_labs") else "")
    app.connect("builder-inited", _keep_outputs_in_work, priority=900)  # after MyST-NB's own (500)
    app.connect("source-read", _source_read)
    app.connect("doctree-read", _doctree_read)
    app.connect("env-get-outdated", _always_reread)
    app.connect("doctree-resolved", _doctree_resolved)
    app.connect("build-finished", _build_finished)
    app.add_css_file("torchcontracts.css")
    return {"parallel_read_safe": False, "parallel_write_safe": True}

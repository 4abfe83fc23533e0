"""One static page from one notebook: widgets drawn in their last state, a navigation bar, and never a solution.

The site (``torchcontracts.publish.site``) executes each lesson with nbclient, which stores the widgets' state in the
notebook; nbconvert's HTML exporter would need the widget manager from a CDN to draw them, and would then
draw them empty (no kernel). :func:`static_widgets` instead replaces each widget view by plain HTML made
from that stored state: images as images, HTML widgets as their HTML, controls as "label: current value",
boxes as boxes. :func:`guard` refuses any notebook that holds solution or hidden-check cells, so a
solution can never reach a page by mistake.
"""

from __future__ import annotations

import html
import re
from typing import Any

from torchcontracts.labs.format import BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, END_SOLUTION

__all__ = [
    "FORBIDDEN_MARKERS",
    "SiteError",
    "WIDGET_NOTE",
    "error_outputs",
    "guard",
    "static_widgets",
    "strip_noise",
    "to_html",
]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
FORBIDDEN_MARKERS = (BEGIN_SOLUTION, END_SOLUTION, BEGIN_HIDDEN, END_HIDDEN)  # the lab format's own markers
WIDGET_NOTE = "interactive widget, shown in its last state: run the notebook to use it"
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


def error_outputs(nb: Any) -> list[str]:
    """``"cell 12: ValueError"`` for every error output of an executed notebook."""
    return [
        f"cell {i}: {o.get('ename', 'error')}"
        for i, c in enumerate(nb.cells, 1)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def strip_noise(nb: Any) -> None:
    """Drop the profiler's own start/stop lines (kineto writes them to stderr); they say nothing to a reader."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                out["text"] = _NOISE.sub("", out.get("text", ""))
                if not out["text"].strip():
                    continue
            kept.append(out)
        cell["outputs"] = kept


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


def static_widgets(nb: Any) -> int:
    """Replace every widget view in ``nb`` by static HTML of its last state; drop the stored state. Returns the count."""
    models = (nb.metadata.get("widgets", {}).get(WIDGET_STATE) or {}).get("state", {})
    count = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                continue
            body = _render(view.get("model_id", ""), models) or "<i>(the widget's state was not saved)</i>"
            out["data"] = {
                "text/html": f'<div class="tc-static-widget">{body}<div class="tc-w-note">{WIDGET_NOTE}</div></div>',
                "text/plain": out["data"].get("text/plain", ""),
            }
            count += 1
    nb.metadata.pop("widgets", None)
    return count


_PAGE_CSS = """
<style>
.tc-nav{position:sticky;top:0;z-index:10;background:#1f2d3d;color:#fff;padding:6px 16px;font:14px sans-serif}
.tc-nav a{color:#fff;margin-right:14px;text-decoration:none}.tc-nav a:hover{text-decoration:underline}
.tc-static-widget{border:1px solid #ccd;border-radius:4px;padding:6px;margin:4px 0;background:#fafbff}
.tc-w-box{display:flex;gap:8px;flex-wrap:wrap}.tc-w-column{flex-direction:column}.tc-w-row{flex-direction:row}
.tc-w-control{font:13px sans-serif;padding:2px 6px;border:1px solid #ddd;border-radius:3px;background:#fff}
.tc-w-image{max-width:100%}.tc-w-note{font:italic 12px sans-serif;color:#667;margin-top:4px}
</style>
"""


def to_html(nb: Any, *, title: str, nav: str) -> str:
    """The notebook as one HTML page (nbconvert's lab template), with ``nav`` (HTML links) at the top."""
    from nbconvert import HTMLExporter

    nb.metadata["title"] = title
    body, _ = HTMLExporter(template_name="lab").from_notebook_node(nb)
    body = body.replace("</head>", _PAGE_CSS + "</head>", 1)
    return re.sub(r"(<body[^>]*>)", lambda m: m[1] + f'\n<nav class="tc-nav">{nav}</nav>', body, count=1)

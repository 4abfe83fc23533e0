"""`torchcontracts site OUT/`: the course as static HTML, for reading without running it.

It executes the manifest's lessons here (``torchcontracts.course``; the loop of ``publish.runner``, one progress bar
over all their cells), exports each with nbconvert's HTML exporter (widgets drawn in their last state, see
``site_render``), adds the student labs of those lessons from ``labs/`` (never ``solutions/``) unexecuted with their
``.ipynb`` to download, an index with the course map (titles and CPU / CUDA from the manifest, time estimates read
from each notebook's header), and the claims ledger: the verdicts this very build asserted, the cached CPU ledger
for lessons not built, and the recorded GPU verdict beside them when a record exists.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import html
import shutil
import time
from pathlib import Path
from typing import Any, Sequence

from torchcontracts import course
from torchcontracts.core.nbio import nbformat
from torchcontracts.labs.load import load as load_lab
from torchcontracts.publish.ledger_compare import evidence_kind

from torchcontracts.publish.site_render import SiteError, error_outputs, guard, static_widgets, strip_noise, to_html

__all__ = ["SiteReport", "build_site", "run"]


@dataclasses.dataclass
class SiteReport:
    """What a build wrote: pages, executed lessons' seconds, the whole build's seconds and size in bytes."""

    out: Path
    pages: list[Path]
    lesson_seconds: dict[str, float]
    seconds: float = 0.0
    bytes: int = 0


def _nav(prefix: str) -> str:
    return (
        f'<a href="{prefix}index.html">Torch Contracts</a><a href="{prefix}index.html#map">Course map</a>'
        f'<a href="{prefix}ledger.html">Claims ledger</a>'
    )


def _page(title: str, body: str) -> str:
    style = (
        "body{font:15px/1.5 system-ui,sans-serif;margin:0;color:#222}main{max-width:1200px;margin:0 auto;"
        "padding:16px 24px}table{border-collapse:collapse;width:100%;font-size:13px}th,td{border:1px solid "
        "#ccd;padding:4px 6px;vertical-align:top;text-align:left}th{background:#eef}.tc-nav{background:#1f2d3d;"
        "padding:6px 16px}.tc-nav a{color:#fff;margin-right:14px;text-decoration:none}"
        ".v-true{background:#e3f4e3}.v-false{background:#fbe1e1}.v-partly{background:#fdf3d6}"
        ".v-outdated{background:#ece3f7}.v-gpu-only{background:#e0eefb}.v-not-covered{color:#999}"
        ".differs{outline:2px solid #d33}"
    )
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f'<style>{style}</style></head><body><nav class="tc-nav">{_nav("")}</nav><main>{body}</main></body></html>\n'
    )


def _lab_points(stem: str) -> str:
    try:
        spec = load_lab(stem)
        return f"{sum(t.points for t in spec.tasks.values())} pts"
    except Exception:  # noqa: BLE001 - a lab without a checks module: no points to show
        return ""


def _ledger_rows(records: dict[str, dict[str, str]], built: set[str]) -> tuple[list[dict[str, str]], str, Any]:
    """One row per claim: this build's verdict, else the cached CPU ledger's, else not covered; plus the GPU record."""
    from torchcontracts.core.claims import all_claims
    from torchcontracts.publish.ledger import cache_paths
    from torchcontracts.publish.record import load_record

    csv_path, meta_path = cache_paths()
    cached = {r["id"]: r for r in csv.DictReader(csv_path.open(encoding="utf-8"))} if csv_path.exists() else {}
    made = ""
    if meta_path.exists():
        import json

        made = json.loads(meta_path.read_text(encoding="utf-8")).get("made", "")
    rec = load_record()
    rows = []
    for cid, c in all_claims().items():
        if cid in records:
            r, origin = records[cid], "this build"
        elif cid in cached and cached[cid]["verdict"] != "not covered" and cached[cid]["notebook"] not in built:
            r, origin = cached[cid], f"cached CPU ledger {made}".strip()
        else:
            r, origin = {}, ""
        gpu = rec.data["claims"].get(cid, {}) if rec else {}
        rows.append(
            {
                "id": cid,
                "topic": c.topic,
                "lesson": c.lesson,
                "claim": c.en,
                "seed words": c.zh,
                "verdict": r.get("verdict", "not covered"),
                "basis": evidence_kind(r) if r else "",
                "expects": r.get("expect", ""),
                "evidence": r.get("evidence", ""),
                "source": r.get("source", ""),
                "torch": r.get("torch", ""),
                "origin": origin,
                "cuda verdict": gpu.get("verdict", ""),
                "cuda evidence": gpu.get("evidence", ""),
            }
        )
    return rows, (rec.label if rec else ""), rec


def _ledger_page(rows: list[dict[str, str]], gpu_label: str) -> str:
    from collections import Counter

    counts = Counter(r["verdict"] for r in rows)
    cols = ["id", "topic", "lesson", "claim", "seed words", "verdict", "basis", "expects", "evidence", "source"]
    cols += ["torch", "origin"]
    if gpu_label:
        cols += ["cuda verdict", "cuda evidence"]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        differs = gpu_label and r["cuda verdict"] and r["cuda verdict"] != r["verdict"]
        cells = "".join(
            f'<td class="v-{r[c].replace(" ", "-")}">{html.escape(r[c])}</td>'
            if c in ("verdict", "cuda verdict")
            else f"<td>{html.escape(r[c])}</td>"
            for c in cols
        )
        body.append(f'<tr id="{r["id"]}"{" class=differs" if differs else ""}>{cells}</tr>')
    summary = ", ".join(f"{html.escape(v)}: {n}" for v, n in counts.most_common())
    gpu = (
        f"<p>CUDA verdicts from the GPU record: {html.escape(gpu_label)}; rows outlined in red differ by device.</p>"
        if gpu_label
        else "<p>No GPU record in this copy of the course: <code>torchcontracts record</code> on a GPU adds one.</p>"
    )
    return _page(
        "Claims ledger",
        f"<h1>The claims ledger</h1><p>{len(rows)} claims. {summary}.</p>{gpu}"
        f'<p>Download it as <a href="ledger.csv">ledger.csv</a>.</p><table id="ledger"><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table>",
    )


def _index_page(lessons: list[dict[str, Any]], rows: list[dict[str, str]], stamp: str) -> str:
    from collections import Counter

    trs = []
    for les in lessons:
        lab = (
            "; ".join(
                f'<a href="{lab["href"]}">{html.escape(lab["id"])}</a> ({lab["points"]}), {lab["minutes"]} min'
                for lab in les["labs"]
            )
            or "-"
        )
        trs.append(
            f'<tr><td>{les["number"]}</td><td><a href="{les["href"]}">{html.escape(les["title"])}</a> '
            f'(<a href="{les["ipynb"]}">.ipynb</a>)</td><td class="minutes">{les["minutes"]} min</td>'
            f"<td>{lab}</td><td>{html.escape(les['cuda'])}</td><td>{les['seconds']}</td></tr>"
        )
    counts = Counter(r["verdict"] for r in rows)
    covered = sum(n for v, n in counts.items() if v != "not covered")
    body = (
        "<h1>Torch Contracts</h1><p>A course in PyTorch engineering that proves every statement it makes by running it. "
        "Its raw material is four popular articles about PyTorch \u201ccontracts\u201d: 124 checkable claims, many of "
        "them wrong. Each lesson states a claim, measures what PyTorch really does, and asserts a verdict. These pages "
        f"show the lessons as executed for this site ({html.escape(stamp)}); run the notebooks to re-prove them on "
        'your machine.</p><h2 id="map">Course map</h2><table id="course-map"><thead><tr><th>#</th><th>lesson</th>'
        "<th>time (from the notebook's header)</th><th>lab</th><th>CPU / CUDA</th><th>executed in (s)</th></tr></thead>"
        f"<tbody>{''.join(trs)}</tbody></table><h2>The claims ledger</h2><p>{covered} of {len(rows)} claims have a "
        f'verdict: {", ".join(f"{v} {n}" for v, n in counts.most_common())}. <a href="ledger.html">The whole ledger</a>.'
        "</p>"
    )
    return _page("Torch Contracts", body)


MARKER = ".torchcontracts-site"  # in OUT: the folder is a site this command built, so its pages may be replaced


def _claim_folder(root: Path, out: Path) -> None:
    """Refuse to write into the course itself or into a folder of something else; mark OUT as a site."""
    target, course = out.resolve(), root.resolve()
    if (
        target == course
        or target in course.parents
        or course in target.parents
        and target.name in ("notebooks", "labs", "solutions", "helpers", "tests")
    ):
        raise SiteError(f"site: {out} is the course or one of its folders: pick a new folder, e.g. site/")
    if target.exists() and any(target.iterdir()) and not (target / MARKER).exists():
        raise SiteError(f"site: {out} is not empty and was not made by `torchcontracts site`: pick a new folder")
    target.mkdir(parents=True, exist_ok=True)
    (target / MARKER).write_text("built by `torchcontracts site`; rebuilding replaces its pages\n", encoding="utf-8")


def _minutes(nb: Any) -> str:
    """'45' or '60-90' from a notebook's header (the parser the README and the workshop kit use); '' if absent."""
    try:
        return course.header_minutes(nb.cells[0].source if nb.cells else "")
    except ValueError:
        return ""


def build_site(
    root: Path,
    out: Path,
    *,
    only: Sequence[str] | None = None,
    labs: bool = True,
    progress: bool = True,
    cell_timeout: float = 120,
    lessons: Sequence[course.Lesson] | None = None,
) -> SiteReport:
    """Execute the lessons and write the site into ``out``; :class:`SiteError` names a lesson that fails.

    The lessons are the manifest's (``only``: number prefixes); ``lessons`` gives other rows (tests build a
    course of their own).
    """
    import torch

    from torchcontracts.publish.runner import run_lessons

    start = time.perf_counter()
    picked = list(lessons) if lessons is not None else course.lessons(only)
    if not picked:
        raise SiteError(f"site: no lesson of the course manifest matches --only {' '.join(only or [])}")
    _claim_folder(root, out)
    paths = [root / les.notebook for les in picked]
    for path in paths:
        if not path.is_file():
            raise SiteError(f"site: {path} is in the course manifest but not on disk: run this from the course root")
    for sub in ("lessons", "labs"):
        shutil.rmtree(out / sub, ignore_errors=True)
        (out / sub).mkdir(parents=True, exist_ok=True)
    report = SiteReport(out, [], {})
    records: dict[str, dict[str, str]] = {}
    entries: dict[str, dict[str, Any]] = {}
    runs = run_lessons(paths, cell_timeout=cell_timeout, progress=progress)
    with contextlib.closing(runs):  # a failing lesson closes the progress bar at once
        for les, path, result in zip(picked, paths, runs, strict=True):
            if result.error or error_outputs(result.nb):
                raise SiteError(
                    f"site: {result.error or path.name + ' ' + ', '.join(error_outputs(result.nb))}: "
                    "fix the lesson (or leave it out with --only) and build again"
                )
            records.update({r["id"]: r for r in result.records})
            report.lesson_seconds[path.name] = round(result.seconds, 1)
            nb = result.nb
            guard(nb, path.name)
            strip_noise(nb)
            static_widgets(nb)
            target = out / "lessons" / f"{les.stem}.html"
            target.write_text(to_html(nb, title=f"{les.number} · {les.title}", nav=_nav("../")), encoding="utf-8")
            shutil.copy2(path, out / "lessons" / path.name)
            report.pages.append(target)
            entries[les.number] = {
                "number": les.number,
                "title": les.title,
                "href": f"lessons/{target.name}",
                "ipynb": f"lessons/{path.name}",
                "minutes": _minutes(nb),
                "cuda": les.cuda,
                "seconds": f"{result.seconds:.0f}",
                "labs": [],
            }
    for les in picked if labs else []:
        for lab_id in les.labs:
            lab = root / "labs" / f"{lab_id}.ipynb"
            nb = nbformat.read(lab, as_version=4)
            guard(nb, f"labs/{lab.name}")
            static_widgets(nb)
            target = out / "labs" / f"{lab_id}.html"
            target.write_text(to_html(nb, title=f"{lab_id} (student lab)", nav=_nav("../")), encoding="utf-8")
            shutil.copy2(lab, out / "labs" / lab.name)
            report.pages.append(target)
            entries[les.number]["labs"].append(
                {"id": lab_id, "href": f"labs/{target.name}", "minutes": _minutes(nb), "points": _lab_points(lab_id)}
            )
    rows, gpu_label, _ = _ledger_rows(records, {p.name for p in paths})
    with open(out / "ledger.csv", "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    (out / "ledger.html").write_text(_ledger_page(rows, gpu_label), encoding="utf-8")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    stamp = f"{time.strftime('%Y-%m-%d')}, torch {torch.__version__} on {device}"
    (out / "index.html").write_text(_index_page(list(entries.values()), rows, stamp), encoding="utf-8")
    report.pages += [out / "index.html", out / "ledger.html"]
    report.seconds = time.perf_counter() - start
    report.bytes = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return report


def run(args: argparse.Namespace) -> int:
    """``torchcontracts site OUT/``: build, then say where, how long and how big in one line."""
    from torchcontracts.labs.format import find_root

    try:
        report = build_site(
            find_root(),
            Path(args.out),
            only=args.only,
            labs=not args.no_labs,
            progress=not args.quiet,
            cell_timeout=args.cell_timeout,
        )
    except (SiteError, FileNotFoundError) as err:
        print(err)
        return 1
    for name, secs in report.lesson_seconds.items():
        print(f"  {name}: {secs:.1f} s")
    print(
        f"site: {len(report.pages)} pages in {args.out} ({report.bytes / 1e6:.1f} MB), built in {report.seconds:.0f} s; "
        f"open {Path(args.out) / 'index.html'}"
    )
    return 0

"""`torchcontracts site OUT/`: the course as a Sphinx site (MyST-NB, the book theme), for reading without running it.

This module is the glue the engine needs: it lays out a Sphinx project in the build cache (``.site-cache/`` in the
course root, or ``--cache DIR``; never inside OUT, which holds only what is published): the manifest's lessons
from ``notebooks/``, their student labs from ``labs/``, never ``solutions/``), writes its ``conf.py``, an index page
with the course map (``publish.course_map``, the README's table) whose hidden toctree gives the sidebar, previous/next
and search their course order, and the claims ledger page; then it runs ``sphinx-build``. MyST-NB executes the
lessons through its cache (jupyter-cache): a rebuild executes only a lesson whose code cells, package folder
(``helpers/torchcontracts/lessons/lNN_*``), ``core/`` or ``data/`` changed, or whose torch or ``TORCHCONTRACTS_*`` setting did.
``publish.site_sphinx`` draws widgets in their last state, adds "Download .ipynb", "Open in Colab" and "verified
with torch X on CPU, date" to each page, keeps each lesson's verdicts, and fills in the ledger.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import hashlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from torchcontracts import course
from torchcontracts.core.nbio import nbformat
from torchcontracts.publish.ledger_compare import evidence_kind
from torchcontracts.publish.site_sphinx import LEDGER_SLOT, SiteError, guard

__all__ = ["SiteReport", "build_site", "ledger_html", "run"]

CACHE = ".site-cache"  # in the course root (gitignored): Sphinx sources, doctrees, the execution cache; never in OUT


@dataclasses.dataclass
class SiteReport:
    """What a build wrote: pages, lessons' execution seconds (None: read from the cache), the build's seconds, bytes."""

    out: Path
    pages: list[Path]
    lesson_seconds: dict[str, float | None]
    seconds: float = 0.0
    bytes: int = 0


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


def ledger_html(records: dict[str, dict[str, str]], built: set[str]) -> tuple[str, str]:
    """The ledger page's body (summary and table, HTML) and ledger.csv, from this build's verdicts."""
    from collections import Counter

    rows, gpu_label, _ = _ledger_rows(records, built)
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
    table = (
        f'<p>{len(rows)} claims. {summary}.</p>{gpu}<p>Download it as <a href="ledger.csv">ledger.csv</a>.</p>'
        f'<div class="tc-ledger"><table id="ledger"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
        "</table></div>"
    )
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return table, buf.getvalue()


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


def _put(path: Path, data: bytes) -> None:
    """Write only what changed: Sphinx re-reads (and MyST-NB re-checks) a source whose time changed."""
    if path.exists() and path.read_bytes() == data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def _index_md(root: Path, picked: Sequence[course.Lesson], labs: bool) -> str:
    from torchcontracts.publish.course_map import course_map

    table = course_map(root, picked)
    if not labs:  # no lab pages: their names stay, their links go
        table = re.sub(r"\[([^\]]+)\]\(labs/[^)]+\)", r"\1", table)
    toc = [f"notebooks/{les.stem}" for les in picked]
    if labs:
        toc = [d for les in picked for d in [f"notebooks/{les.stem}", *(f"labs/{lab}" for lab in les.labs)]]
    return (
        "# Torch Contracts\n\nA course in PyTorch engineering that proves every statement it makes by running it. Its raw "
        'material is four popular articles about PyTorch "contracts": 124 checkable claims, many of them wrong. Each '
        "lesson states a claim, measures what PyTorch really does, and asserts a verdict. These pages show the lessons "
        "as executed for this site (each page says with which torch, where and when); run the notebooks to re-prove "
        "them on your machine. Every verdict is in [the claims ledger](ledger.md).\n\n"
        f"(course-map)=\n## Course map\n\n{table}\n\n"
        "```{toctree}\n:hidden:\n:caption: Course\n\n" + "\n".join(toc) + "\nledger\n```\n"
    )


_LEDGER_MD = f"""# The claims ledger

Every claim of the course with the verdict this site's lessons asserted, the cached CPU ledger's for lessons not
built, and the recorded GPU verdict beside it where a GPU record exists.

```{{raw}} html
{LEDGER_SLOT}
```
"""


def _conf_py(work: Path, settings: dict[str, Any]) -> str:
    lines = [
        '"""Made by `torchcontracts site` (publish/site.py) for this build; edits are overwritten."""',
        'project = "Torch Contracts"',
        'author = "the Torch Contracts authors"',
        "smartquotes = False  # the prose as written in the notebooks",
        'extensions = ["myst_nb", "torchcontracts.publish.site_sphinx"]',
        'html_theme = "sphinx_book_theme"',
        'html_title = "Torch Contracts"',
        'html_theme_options = {"use_download_button": True, "show_toc_level": 2, "home_page_in_toc": True}',
        'html_sourcelink_suffix = ""  # _sources/notebooks/X.ipynb: the "Download .ipynb" link',
        'html_last_updated_fmt = ""',
        'myst_enable_extensions = ["dollarmath"]',
        "myst_heading_anchors = 3",
        'nb_execution_mode = "cache"',
        f"nb_execution_cache_path = {str(work / settings.pop('cache'))!r}",
        f"nb_execution_timeout = {int(settings.pop('cell_timeout'))}",
        'nb_execution_excludepatterns = ["labs/*"]  # student labs are shown as handed out',
        "nb_execution_raise_on_error = False  # the extension stops the build in one line instead",
        'nb_render_plugin = "torchcontracts"  # static widgets (publish/site_sphinx.py)',
        "nb_ipywidgets_js = {}  # no widget manager from a CDN",
        'suppress_warnings = ["mystnb.unknown_mime_type", "myst.header"]',
    ]
    lines += [f"{k} = {v!r}" for k, v in settings.items()]
    return "\n".join(lines) + "\n"


def _cache_key() -> str:
    """What an executed lesson depends on besides its code cells: the torch build and the course's environment."""
    import torch

    env = sorted(
        (k, v) for k, v in os.environ.items() if k.startswith("TORCHCONTRACTS_") and k != "TORCHCONTRACTS_LEDGER"
    )
    return hashlib.sha256(repr((torch.__version__, sys.executable, env)).encode()).hexdigest()[:12]


def _package_hash(root: Path, les: course.Lesson) -> str:
    """The lesson's package folder, ``core/`` and ``data/`` (the GPU record a lesson prints beside its CPU figures,
    the cached ledger lesson 10 reads): a change there executes the lesson again, though its code cells did not."""
    h = hashlib.sha256()
    pkg = root / "helpers" / "torchcontracts"
    for folder in (pkg / "lessons" / les.package, pkg / "core", pkg / "data"):
        for path in sorted(folder.rglob("*")) if folder.is_dir() else []:
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                h.update(str(path.relative_to(pkg)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _with_package_hash(data: bytes, digest: str) -> bytes:
    """The notebook with the package hash in its kernelspec, the metadata jupyter-cache hashes with the code cells."""
    nb = json.loads(data)
    spec = nb.setdefault("metadata", {}).setdefault("kernelspec", {"name": "python3", "display_name": "Python 3"})
    spec["torchcontracts_package"] = digest
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode()


def _kernel(work: Path) -> Path:
    """A kernelspec "python3" that is this interpreter, first on JUPYTER_PATH (a stale user kernelspec never runs)."""
    spec = work / "jupyter" / "kernels" / "python3" / "kernel.json"
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    _put(spec, json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}).encode())
    return work / "jupyter"


def build_site(
    root: Path,
    out: Path,
    *,
    only: Sequence[str] | None = None,
    labs: bool = True,
    progress: bool = True,
    cell_timeout: float = 120,
    lessons: Sequence[course.Lesson] | None = None,
    repo: str = "",
    fresh: bool = False,
    cache: Path | None = None,
) -> SiteReport:
    """Lay out the Sphinx project, build it into ``out``; :class:`SiteError` names a lesson that fails.

    The lessons are the manifest's (``only``: number prefixes); ``lessons`` gives other rows (tests build a course
    of their own). ``cache`` holds the build's sources, doctrees and execution cache (default ``root/.site-cache``);
    ``fresh`` empties it first. ``progress`` prints one line per page read; Sphinx's own log goes to
    ``CACHE/site-*/sphinx.log``.
    """
    import torch

    start = time.time()
    picked = list(lessons) if lessons is not None else course.lessons(only)
    if not picked:
        raise SiteError(f"site: no lesson of the course manifest matches --only {' '.join(only or [])}")
    _claim_folder(root, out)
    cache = (cache or root / CACHE).resolve()
    if cache == out.resolve() or out.resolve() in cache.parents:
        raise SiteError(f"site: the build cache {cache} would be published inside {out}: pick a --cache outside it")
    work = cache / f"site-{hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:10]}"  # one per OUT
    src = work / "src"
    if fresh:
        shutil.rmtree(cache, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    (cache / ".gitignore").write_text("*\n", encoding="utf-8")
    wanted: dict[Path, bytes] = {}
    for les in picked:
        path = root / les.notebook
        if not path.is_file():
            raise SiteError(f"site: {path} is in the course manifest but not on disk: run this from the course root")
        guard(nbformat.read(path, as_version=4), les.notebook)
        wanted[src / les.notebook] = _with_package_hash(path.read_bytes(), _package_hash(root, les))
        for lab_id in les.labs if labs else ():
            lab = root / "labs" / f"{lab_id}.ipynb"
            guard(nbformat.read(lab, as_version=4), f"labs/{lab.name}")  # labs/, never solutions/
            wanted[src / "labs" / lab.name] = lab.read_bytes()
    wanted[src / "index.md"] = _index_md(root, picked, labs).encode()
    wanted[src / "ledger.md"] = _LEDGER_MD.encode()
    for old in [p for p in src.rglob("*") if p.is_file()] if src.exists() else []:
        if old not in wanted:  # a lesson left out this time: not a page, not executed, and its old page goes
            rel = old.relative_to(src)
            for stale in (old, out / rel.with_suffix(".html"), out / rel, out / "_sources" / rel):
                stale.unlink(missing_ok=True)
    for path, data in wanted.items():
        _put(path, data)
    (work / "failed.txt").unlink(missing_ok=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    settings = {
        "cache": str(cache / f"jupyter-cache-{_cache_key()}"),  # shared by every OUT built from this course
        "cell_timeout": cell_timeout,
        "tc_work": str(work.resolve()),
        "tc_lessons": [f"notebooks/{les.stem}" for les in picked],
        "tc_labs": [f"labs/{lab}" for les in picked for lab in (les.labs if labs else ())],
        "tc_repo": repo,
        "tc_torch": torch.__version__,
        "tc_device": device,
        "tc_started": start,
        "tc_progress": progress,
    }
    _put(work / "conf" / "conf.py", _conf_py(work.resolve(), settings).encode())
    env = {
        **os.environ,
        "JUPYTER_PATH": os.pathsep.join([str(_kernel(work).resolve()), os.environ.get("JUPYTER_PATH", "")]),
    }
    env.pop("TORCHCONTRACTS_LEDGER", None)
    cmd = [sys.executable, "-m", "sphinx", "-q", "-b", "html", "-c", str(work / "conf"), "-d", str(work / "doctrees")]
    log = work / "sphinx.log"  # Sphinx's warnings and tracebacks, the kernels' stderr: not the reader's screen
    with log.open("w", encoding="utf-8") as sink:
        proc = subprocess.run([*cmd, str(src), str(out)], env=env, text=True, stderr=sink)
    failed = work / "failed.txt"
    if failed.exists():
        raise SiteError(
            f"site: {failed.read_text(encoding='utf-8')}: fix the lesson (or leave it out with --only) and build again"
        )
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
        last = next(
            (ln.strip() for ln in reversed(lines) if "Error" in ln or "error" in ln), lines[-1] if lines else ""
        )
        raise SiteError(f"site: sphinx-build failed (exit {proc.returncode}): {last[:300]} (whole log: {log})")
    kept = json.loads((work / "report.json").read_text(encoding="utf-8"))["lessons"]
    report = SiteReport(out, [], {})
    for name, data in kept.items():
        report.lesson_seconds[name] = round(data["seconds"], 1) if data["executed"] and data["seconds"] else None
    report.pages = [
        out / "index.html",
        *(out / f"{d}.html" for d in settings["tc_lessons"] + settings["tc_labs"]),
        out / "ledger.html",
    ]
    report.seconds = time.time() - start
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
            repo=args.repo if args.repo is not None else os.environ.get("TORCHCONTRACTS_REPO", ""),
            fresh=args.fresh,
            cache=Path(args.cache) if args.cache else None,
        )
    except (SiteError, FileNotFoundError) as err:
        print(err)
        return 1
    ran = sum(secs is not None for secs in report.lesson_seconds.values())
    if not args.quiet:
        print(f"site: {ran} of {len(report.lesson_seconds)} lessons executed, the others served from the cache")
    print(
        f"site: {len(report.pages)} pages in {args.out} ({report.bytes / 1e6:.1f} MB), built in {report.seconds:.0f} s; "
        f"open {Path(args.out) / 'index.html'}"
    )
    return 0

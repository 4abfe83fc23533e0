"""A GPU owner's record of the course, and the tiny API lessons use to show a recorded GPU figure beside their own.

``torchcontracts record`` runs only where a CUDA device really computes. It executes the manifest's lessons on
that device with the loop the ledger and the site share (``runner.run_lessons``), then every GPU comparison the
lessons define (``torchcontracts.publish.gpu_checks``: the allocator model against the real allocator, the roofline
ceilings, the async and stream demos), and writes one JSON file into the package's data, ``data/gpu_record.json``: the
device, its capability and driver, torch, the date, each claim's verdict and evidence, and the figures.
On a CPU it refuses in one line and writes nothing. Nothing in this repository fakes a record: the test
fixture lives under ``tests/``, says ``"fixture": true``, and every label made from it says so. ``record --rehearsal``
runs the same on a CPU and writes a record marked ``"rehearsal": true`` (``torchcontracts.publish.rehearsal``), which
:func:`load_record` refuses: it proves the GPU kit (``.ci/gpu-kit``) works, and is never a GPU figure.

Lessons read a record through :func:`recorded` (one figure, with its device and date, or None) and
:func:`beside` (the line that puts it next to this machine's own figure). ``TORCHCONTRACTS_GPU_RECORD``
names another record file (a colleague's, or the test fixture).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

from torchcontracts.publish.record_schema import BUDGET_S, SCHEMA, _is_num, assemble, validate

__all__ = [
    "BUDGET_S",
    "RECORD_ENV",
    "SCHEMA",
    "Figure",
    "GpuRecord",
    "RecordError",
    "add_arguments",
    "assemble",
    "beside",
    "load_record",
    "package_record_file",
    "record_path",
    "recorded",
    "refusal",
    "run",
    "validate",
]

RECORD_ENV = "TORCHCONTRACTS_GPU_RECORD"  # another record file to read (a colleague's, or the tests' fixture)
RECORD_FILE = "gpu_record.json"  # in the package's data/


class RecordError(ValueError):
    """A file that is not a valid GPU record; the message names the file and the first bad field."""


def _num(value: float) -> str:
    """A figure as people read it: 4,300 / 12.5 / 0.873."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"


@dataclasses.dataclass(frozen=True)
class Figure:
    """A recorded GPU figure with the device and date it was measured on."""

    key: str
    value: float
    unit: str
    what: str
    device: str
    capability: str
    date: str
    fixture: bool = False

    @property
    def label(self) -> str:
        """``NVIDIA H200 (capability 9.0), 2026-12-01``; a fixture says it is one."""
        text = f"{self.device} (capability {self.capability}), {self.date}"
        return text + (" [FIXTURE: test data, not a measurement]" if self.fixture else "")

    def __str__(self) -> str:
        return f"{_num(self.value)} {self.unit} on {self.label}"


@dataclasses.dataclass(frozen=True)
class GpuRecord:
    """A loaded, validated GPU record (the JSON ``data``) and the file it came from."""

    data: dict[str, Any]
    path: str

    @property
    def fixture(self) -> bool:
        return bool(self.data.get("fixture"))

    @property
    def label(self) -> str:
        d = self.data["device"]
        text = f"{d['name']} (capability {d['capability']}), torch {self.data['torch']}, {self.data['date']}"
        return text + (" [FIXTURE: test data, not a measurement]" if self.fixture else "")

    def figure(self, key: str) -> Figure | None:
        f = self.data["figures"].get(key)
        if f is None:
            return None
        d = self.data["device"]
        return Figure(
            key, float(f["value"]), f["unit"], f["what"], d["name"], d["capability"], self.data["date"], self.fixture
        )

    def claims_frame(self) -> Any:
        """The recorded verdicts as a pandas table: id, verdict, basis (read from the source in a record made before
        verdicts carried one), evidence, source, notebook."""
        import pandas as pd

        from torchcontracts.publish.ledger_compare import evidence_kind

        cols = ["id", "verdict", "basis", "evidence", "source", "notebook"]
        rows = [{"id": cid, **c, "basis": evidence_kind(c)} for cid, c in sorted(self.data["claims"].items())]
        return pd.DataFrame([{k: r[k] for k in cols} for r in rows], columns=cols)


def package_record_file() -> Path:
    """The package's own record, data/gpu_record.json (absent until a GPU owner commits one)."""
    return Path(__file__).resolve().parents[1] / "data" / RECORD_FILE


def record_path() -> Path:
    """The record lessons read: ``$TORCHCONTRACTS_GPU_RECORD`` if set, else :func:`package_record_file`."""
    env = os.environ.get(RECORD_ENV)
    return Path(env) if env else package_record_file()


def load_record(path: str | Path | None = None) -> GpuRecord | None:
    """The GPU record, validated; None when there is none. A broken file raises :class:`RecordError`.

    The package's own record may never be a fixture: fixtures are test data and live under tests/.
    """
    target = Path(path) if path is not None else record_path()
    if not target.exists():
        return None
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise RecordError(f"{target}: not a readable JSON record ({err})") from None
    problems = validate(data)
    if problems:
        raise RecordError(
            f"{target}: not a valid GPU record: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        )
    if data.get("rehearsal"):
        raise RecordError(f"{target}: a CPU rehearsal (`record --rehearsal`), not a GPU record: lessons never read one")
    if data["fixture"] and target.resolve() == package_record_file().resolve():
        raise RecordError(f"{target}: the package's record is a test fixture; delete it (fixtures live under tests/)")
    return GpuRecord(data, str(target))


def recorded(key: str) -> Figure | None:
    """A recorded GPU figure (``"roofline.hbm_GBps"``) with its device and date, or None without a record.

    Not to be confused with ``torchcontracts.core.claims.recorded()``, the verdicts asserted in this process.
    """
    rec = load_record()
    return rec.figure(key) if rec is not None else None


def beside(key: str, here: float | str | None, unit: str, *, here_label: str | None = None) -> str:
    """One line: this machine's figure, then the recorded GPU figure with its device and date (or why there is none).

    ``here`` may be a string such as ``"noisy: rerun on a quiet machine"`` (``timing`` refuses noisy figures).
    """
    if here_label is None:
        import torch

        here_label = "cuda" if torch.cuda.is_available() else "cpu"
    mine = f"{_num(here)} {unit}" if _is_num(here) else str(here if here is not None else "not measured")
    rec = load_record()
    fig = rec.figure(key) if rec is not None else None
    theirs = (
        f"recorded: {fig}"
        if fig is not None
        else f"the GPU record ({rec.label}) has no {key!r}"
        if rec is not None
        else "no GPU record in this copy of the course (`torchcontracts record` on a GPU writes one)"
    )
    return f"{key}: this machine ({here_label}): {mine} | {theirs}"


# -- the command ------------------------------------------------------------------------------------------------
def refusal() -> str | None:
    """Why this machine cannot make a record, in one line (None when a CUDA kernel really ran)."""
    import torch

    if not torch.cuda.is_available():
        build = "a CPU build" if not torch.version.cuda else f"a CUDA {torch.version.cuda} build, but no usable GPU"
        return (
            f"record: no CUDA device here (torch {torch.__version__}, {build}): run it on a machine with an "
            "NVIDIA GPU; nothing was written"
        )
    try:
        a = torch.arange(16.0, device="cuda").reshape(4, 4)
        ok = float((a @ a).sum().cpu()) == float(
            (torch.arange(16.0).reshape(4, 4) @ torch.arange(16.0).reshape(4, 4)).sum()
        )
    except Exception as err:
        return f"record: CUDA is available but a kernel failed ({type(err).__name__}): run `torchcontracts doctor`"
    return None if ok else "record: the GPU computed a wrong matmul: run `torchcontracts doctor`; nothing was written"


def _driver_version() -> str:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text)
        if found:
            return found[1]
    except OSError:
        pass
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def device_info() -> dict[str, Any]:
    """The record's device block, for CUDA device 0."""
    import torch

    props = torch.cuda.get_device_properties(0)
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "driver": _driver_version(),
        "cuda": str(torch.version.cuda or ""),
        "memory_gib": round(props.total_memory / 2**30, 1),
        "count": torch.cuda.device_count(),
    }


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``torchcontracts record``."""
    p.add_argument("--out", help=f"where to write the record (default: the package's data/{RECORD_FILE})")
    p.add_argument("--only", nargs="*", help="lesson number prefixes (a partial record, marked incomplete)")
    p.add_argument(
        "--budget",
        type=float,
        default=BUDGET_S,
        metavar="SECONDS",
        help=f"stop starting lessons and comparisons after this long (default {BUDGET_S:.0f})",
    )
    p.add_argument("--cell-timeout", type=float, default=120, metavar="SECONDS", help="seconds one cell may run")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--rehearsal",
        action="store_true",
        help="on a CPU: run every lesson and each comparison's CPU half, write a record marked as a rehearsal "
        "(never a GPU record; default --out in the temp folder)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="RECORD",
        help="join the partial records of several device calls (same GPU and torch) into --out; runs nothing",
    )
    p.add_argument(
        "--progress",
        metavar="FILE",
        help="append one JSON line per lesson and comparison as each finishes, flushed (a run cut off still says "
        "where it stopped)",
    )
    return p


def run(args: argparse.Namespace) -> int:
    """``torchcontracts record``: refuse on a CPU; on a GPU run the lessons and comparisons, write the record.

    With ``--rehearsal`` the CPU run of :mod:`torchcontracts.publish.rehearsal` instead (never a GPU record).
    """
    from torchcontracts.publish import rehearsal

    if getattr(args, "rehearsal", False):
        return rehearsal.run(args)
    if getattr(args, "merge", None):
        from torchcontracts.publish.record_merge import merge_files

        out = Path(args.out) if args.out else package_record_file()
        try:
            merged = merge_files(args.merge, out)
        except ValueError as err:
            print(f"record --merge: {err}")
            return 1
        done = ", ".join(f"{n[:2]}{'' if not les['error'] else ' (failed)'}" for n, les in merged["lessons"].items())
        print(f"record --merge: {len(args.merge)} parts, lessons {done}; complete: {merged['complete']}; wrote {out}")
        return 0
    reason = refusal()
    if reason:
        print(reason)
        return 1
    import torch

    from torchcontracts.publish import gpu_checks

    start = time.monotonic()
    progress = rehearsal.Progress(getattr(args, "progress", None))
    progress.write("start", mode="gpu", budget_s=args.budget, torch=torch.__version__, only=list(args.only or []))
    out = Path(args.out) if args.out else package_record_file()
    device = device_info()

    def write_partial(lessons: dict[str, dict[str, Any]], claims: dict[str, dict[str, str]]) -> None:
        """The record so far, marked incomplete: what a run stopped at the device call's limit leaves."""
        partial = assemble(
            lessons,
            claims,
            {},
            device=device,
            seconds=time.monotonic() - start,
            torch_version=torch.__version__,
            partial=True,
        )
        if not validate(partial):
            out.write_text(json.dumps(partial, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")

    lessons, claims = rehearsal.run_lessons_logged(
        args, progress, desc="lessons on CUDA", deadline=start + args.budget, after_each=write_partial
    )
    missing = gpu_checks.load_modules()
    comparisons = gpu_checks.run_all(deadline=start + args.budget, progress=not args.quiet)
    progress.comparisons(comparisons)
    record = assemble(
        lessons,
        claims,
        comparisons,
        device=device,
        seconds=time.monotonic() - start,
        torch_version=torch.__version__,
        partial=bool(args.only),
    )
    problems = validate(record)
    if problems:
        print(f"record: the record came out malformed ({problems[0]}); nothing was written: please report this")
        progress.write("end", status="failed", exit=1, record="", failed=[problems[0]])
        return 1
    out.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name, les in lessons.items():
        print(
            f"  {name}: {les['seconds']:.1f} s, {les['claims']} verdicts"
            + (f"; {les['error']}" if les["error"] else "")
        )
    for name, comp in comparisons.items():
        print(f"  {name} (lesson {comp['lesson']}): {'ok' if comp['ok'] else 'NOT OK'}: {comp['detail']}")
    if missing:
        print(f"  not yet written, so not compared: {', '.join(missing)}")
    print(
        f"record: {record['device']['name']} (capability {record['device']['capability']}), torch {torch.__version__}: "
        f"{len(claims)} claims with a verdict, {sum(c['ok'] for c in comparisons.values())}/{len(comparisons)} "
        f"comparisons ok, {len(record['figures'])} figures, {record['seconds']:.0f} s; wrote {out}"
    )
    if record["seconds"] > args.budget:
        print(f"record: took {record['seconds']:.0f} s, over the {args.budget:.0f} s budget: shrink the slowest lesson")
    failed = [n for n, les in lessons.items() if les["error"]] + [n for n, c in comparisons.items() if not c["ok"]]
    progress.write("end", status="failed" if failed else "ok", exit=int(bool(failed)), record=str(out), failed=failed)
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchcontracts.publish.record``, the same as ``torchcontracts record``."""
    p = add_arguments(
        argparse.ArgumentParser(
            prog="torchcontracts record", description="run every lesson and GPU comparison on CUDA; write the record"
        )
    )
    return run(p.parse_args(argv))

"""A GPU owner's record of the course, and the tiny API lessons use to show a recorded GPU figure beside their own.

``torchcontracts record`` runs only where a CUDA device really computes. It executes every lesson on that
device with the ledger's machinery (``ledger.run_lesson``), then every GPU comparison the lessons define
(``torchcontracts.publish.gpu_checks``: the allocator model against the real allocator, the roofline ceilings, the
async and stream demos), and writes one JSON file into the package's data, ``data/gpu_record.json``: the
device, its capability and driver, torch, the date, each claim's verdict and evidence, and the figures.
On a CPU it refuses in one line and writes nothing. Nothing in this repository fakes a record: the test
fixture lives under ``tests/``, says ``"fixture": true``, and every label made from it says so.

Lessons read a record through :func:`recorded` (one figure, with its device and date, or None) and
:func:`beside` (the line that puts it next to this machine's own figure). ``TORCHCONTRACTS_GPU_RECORD``
names another record file (a colleague's, or the test fixture).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import re
import time
from pathlib import Path
from typing import Any, Sequence

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

SCHEMA = "torchcontracts-gpu-record/1"
RECORD_ENV = "TORCHCONTRACTS_GPU_RECORD"  # another record file to read (a colleague's, or the tests' fixture)
RECORD_FILE = "gpu_record.json"  # in the package's data/
BUDGET_S = 480.0  # the whole record must fit in 8 minutes on one GPU
_KEY = re.compile(r"^[a-z0-9_]+\.[A-Za-z0-9_]+$")


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
        """The recorded verdicts as a pandas table: id, verdict, evidence, source, notebook."""
        import pandas as pd

        cols = ["id", "verdict", "evidence", "source", "notebook"]
        return pd.DataFrame(
            [{"id": cid, **{k: c[k] for k in cols[1:]}} for cid, c in sorted(self.data["claims"].items())], columns=cols
        )


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def validate(data: Any) -> list[str]:
    """Every way ``data`` differs from the record schema (an empty list: it is a valid record)."""
    from torchcontracts.core.claims import VERDICTS, all_claims

    if not isinstance(data, dict):
        return ["a record is a JSON object"]
    p: list[str] = []
    if data.get("schema") != SCHEMA:
        p.append(f"schema must be {SCHEMA!r}, got {data.get('schema')!r}")
    for key, kind in (("fixture", bool), ("complete", bool), ("torch", str), ("python", str), ("date", str)):
        if not isinstance(data.get(key), kind):
            p.append(f"{key} must be a {kind.__name__}")
    if isinstance(data.get("date"), str) and not re.fullmatch(r"\d{4}-\d\d-\d\d", data["date"]):
        p.append(f"date must read YYYY-MM-DD, got {data['date']!r}")
    for key in ("seconds", "budget_s"):
        if not _is_num(data.get(key)) or data[key] < 0:
            p.append(f"{key} must be a number of seconds")
    dev = data.get("device")
    if not isinstance(dev, dict):
        p.append("device must be an object")
    else:
        if not (isinstance(dev.get("name"), str) and dev["name"]):
            p.append("device.name must be the GPU's name")
        if not (isinstance(dev.get("capability"), str) and re.fullmatch(r"\d+\.\d+", dev["capability"])):
            p.append(f"device.capability must read like '9.0', got {dev.get('capability')!r}")
        for key in ("driver", "cuda"):
            if not isinstance(dev.get(key), str):
                p.append(f"device.{key} must be a string")
        if not _is_num(dev.get("memory_gib")):
            p.append("device.memory_gib must be a number")
    sections = {k: data.get(k) for k in ("lessons", "claims", "comparisons", "figures")}
    for key, val in sections.items():
        if not isinstance(val, dict):
            p.append(f"{key} must be an object")
    if p:
        return p
    for name, les in data["lessons"].items():
        if not re.fullmatch(r"\d\d_\w+\.ipynb", name) or not isinstance(les, dict):
            p.append(f"lessons: {name!r} is not a lesson notebook name with an object")
        elif not _is_num(les.get("seconds")) or not isinstance(les.get("error"), str):
            p.append(f"lessons.{name} needs seconds (a number) and error (a string, empty when it ran)")
    known = all_claims()
    for cid, c in data["claims"].items():
        if cid not in known:
            p.append(f"claims: unknown claim id {cid!r}")
        elif not isinstance(c, dict) or c.get("verdict") not in VERDICTS:
            p.append(f"claims.{cid}.verdict must be one of {VERDICTS}")
        elif not all(isinstance(c.get(k), str) and c.get(k) for k in ("evidence", "source", "notebook")):
            p.append(f"claims.{cid} needs evidence, source and notebook (non-empty strings)")
    for name, comp in data["comparisons"].items():
        if not (
            isinstance(comp, dict)
            and isinstance(comp.get("ok"), bool)
            and isinstance(comp.get("detail"), str)
            and isinstance(comp.get("lesson"), str)
            and _is_num(comp.get("seconds"))
        ):
            p.append(f"comparisons.{name} needs lesson, ok (a bool), detail and seconds")
    for key, fig in data["figures"].items():
        if not _KEY.match(key):
            p.append(f"figures: key {key!r} must read area.quantity_unit")
        elif not (
            isinstance(fig, dict)
            and _is_num(fig.get("value"))
            and isinstance(fig.get("unit"), str)
            and isinstance(fig.get("what"), str)
        ):
            p.append(f"figures.{key} needs value (a finite number), unit and what")
        elif fig.get("comparison") not in data["comparisons"]:
            p.append(f"figures.{key}.comparison must name one of the record's comparisons")
    ran_clean = all(les["error"] == "" for les in data["lessons"].values() if isinstance(les, dict)) and all(
        c.get("ok") for c in data["comparisons"].values() if isinstance(c, dict)
    )
    if not p and data["complete"] and not ran_clean:
        p.append("complete is true but a lesson failed or a comparison did not agree")
    return p


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


def assemble(
    lessons: dict[str, dict[str, Any]],
    claims: dict[str, dict[str, str]],
    comparisons: dict[str, dict[str, Any]],
    *,
    device: dict[str, Any],
    seconds: float,
    torch_version: str,
    date: str | None = None,
    partial: bool = False,
) -> dict[str, Any]:
    """The record's JSON object from what the lessons and comparisons produced (``validate`` checks it)."""
    figures = {
        key: {**fig, "comparison": name}
        for name, comp in comparisons.items()
        for key, fig in comp.get("figures", {}).items()
    }
    clean = all(not les["error"] for les in lessons.values()) and all(c["ok"] for c in comparisons.values())
    return {
        "schema": SCHEMA,
        "fixture": False,
        "date": date or time.strftime("%Y-%m-%d"),
        "complete": clean and not partial,
        "seconds": round(seconds, 1),
        "budget_s": BUDGET_S,
        "device": device,
        "torch": torch_version,
        "python": platform.python_version(),
        "lessons": lessons,
        "claims": claims,
        "comparisons": comparisons,
        "figures": figures,
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
    return p


def run(args: argparse.Namespace) -> int:
    """``torchcontracts record``: refuse on a CPU; on a GPU run the lessons and comparisons, write the record."""
    reason = refusal()
    if reason:
        print(reason)
        return 1
    import torch
    from tqdm.auto import tqdm

    from torchcontracts.publish import gpu_checks
    from torchcontracts.labs.format import find_root
    from torchcontracts.publish.ledger import code_cells, run_lesson

    start = time.monotonic()
    deadline = start + args.budget
    notebooks = sorted((find_root() / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if args.only:
        notebooks = [p for p in notebooks if any(p.name.startswith(o) for o in args.only)]
    lessons: dict[str, dict[str, Any]] = {}
    claims: dict[str, dict[str, str]] = {}
    bar = tqdm(total=sum(code_cells(p) for p in notebooks), desc="lessons on CUDA", unit="cell", disable=args.quiet)
    try:
        for path in notebooks:
            if time.monotonic() > deadline:
                lessons[path.name] = {
                    "seconds": 0.0,
                    "error": f"not run: the {args.budget:.0f} s budget ran out",
                    "claims": 0,
                }
                continue
            bar.set_postfix_str(path.name)
            result = run_lesson(path, cell_timeout=args.cell_timeout, on_cell=lambda i, done: bar.update(1))
            for rec in result.records:
                claims[rec["id"]] = {k: rec[k] for k in ("verdict", "evidence", "source", "notebook")}
            lessons[path.name] = {
                "seconds": round(result.seconds, 1),
                "error": result.error,
                "claims": len({r["id"] for r in result.records}),
            }
    finally:
        bar.close()
    missing = gpu_checks.load_modules()
    comparisons = gpu_checks.run_all(deadline=deadline, progress=not args.quiet)
    record = assemble(
        lessons,
        claims,
        comparisons,
        device=device_info(),
        seconds=time.monotonic() - start,
        torch_version=torch.__version__,
        partial=bool(args.only),
    )
    problems = validate(record)
    if problems:
        print(f"record: the record came out malformed ({problems[0]}); nothing was written: please report this")
        return 1
    out = Path(args.out) if args.out else package_record_file()
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
    clean = all(not les["error"] for les in lessons.values()) and all(c["ok"] for c in comparisons.values())
    return 0 if clean else 1


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m torchcontracts.publish.record``, the same as ``torchcontracts record``."""
    p = add_arguments(
        argparse.ArgumentParser(
            prog="torchcontracts record", description="run every lesson and GPU comparison on CUDA; write the record"
        )
    )
    return run(p.parse_args(argv))

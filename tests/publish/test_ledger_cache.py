"""The cached CPU ledger (the package's data/ledger_cpu.csv, read by lesson 10) cannot go stale silently,
and the course covers all 124 claims.

The lessons' verdicts are read statically from their `tc.verdict("Cxxx", "...")` calls. A cell that picks a
verdict by device (`if tc.cuda_or_skip(...): verdict(..., "false") else: verdict(..., "gpu-only")`, or
`"false" if on_gpu else "gpu-only"`) offers two; the CPU ledger must hold the one its CPU path asserts.

The one-lesson-per-claim test skips while a lesson 01-09 is missing. The 124/124 coverage test fails when the
cache predates a lesson or misses a claim. `TC_LEDGER_RERUN=1` also reruns the ledger and requires it to agree exactly with the cache (minutes).
"""

from __future__ import annotations

import ast
import csv
import json
import os
import subprocess
import sys

import pytest

from torchcontracts.core.claims import VERDICTS, all_claims, owned_by
from torchcontracts.publish.ledger import COLUMNS, cache_paths

from conftest import ROOT, read
from torchcontracts.course import lessons


CACHE_CSV, CACHE_META = cache_paths()
DEVICE_WORDS = ("cuda", "gpu")  # an `if` whose test names one of these chooses a device path


def cached_rows() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in csv.DictReader(CACHE_CSV.open(encoding="utf-8"))}


def cached_meta() -> dict:
    return json.loads(CACHE_META.read_text(encoding="utf-8"))


def _mentions_device(node: ast.AST) -> bool:
    return any(w in ast.unparse(node).lower() for w in DEVICE_WORDS)


def _negated(test: ast.AST) -> bool:
    return isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)


def _verdict_literals(arg: ast.AST) -> tuple[set[str], set[str]] | None:
    """(verdicts a CPU can assert, all verdicts) of a verdict argument; None when it is not literal."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return {arg.value}, {arg.value}
    if isinstance(arg, ast.IfExp) and all(isinstance(x, ast.Constant) for x in (arg.body, arg.orelse)):
        both = {arg.body.value, arg.orelse.value}
        if not _mentions_device(arg.test):
            return both, both
        cpu = arg.body.value if _negated(arg.test) else arg.orelse.value
        return {cpu}, both
    return None


def verdict_calls(source: str) -> dict[str, dict[str, set[str] | None]]:
    """{claim id: {"cpu": verdicts its CPU path asserts (None: not literal), "all": every literal verdict}}."""
    src = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(src)
    except SyntaxError:
        return {}
    found: dict[str, dict[str, set[str] | None]] = {}

    def visit(node: ast.AST, gpu_only: bool) -> None:
        if isinstance(node, ast.If) and _mentions_device(node.test):
            on_gpu_branch, cpu_branch = (node.orelse, node.body) if _negated(node.test) else (node.body, node.orelse)
            for child in on_gpu_branch:
                visit(child, True)
            for child in cpu_branch:
                visit(child, gpu_only)
            return
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "verdict"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and len(node.args) >= 2
        ):
            cid = node.args[0].value
            entry = found.setdefault(cid, {"cpu": set(), "all": set()})
            lits = _verdict_literals(node.args[1])
            if lits is None:
                entry["cpu"] = None
            else:
                if not gpu_only and entry["cpu"] is not None:
                    entry["cpu"] |= lits[0]
                entry["all"] |= lits[1]
        for child in ast.iter_child_nodes(node):
            visit(child, gpu_only)

    visit(tree, False)
    return found


def lesson_verdicts(path) -> dict[str, dict[str, set[str] | None]]:
    out: dict[str, dict[str, set[str] | None]] = {}
    for cell in read(path).cells:
        if cell.cell_type == "code":
            for cid, v in verdict_calls(cell.source).items():
                e = out.setdefault(cid, {"cpu": set(), "all": set()})
                e["cpu"] = None if e["cpu"] is None or v["cpu"] is None else e["cpu"] | v["cpu"]
                e["all"] |= v["all"]
    return out


def test_the_parser_knows_which_verdict_a_cpu_asserts():
    src = """
tc.verdict("C001", "false", evidence="e", proof=p)
if tc.cuda_or_skip("03-x"):
    tc.verdict("C019", "false", evidence="e", proof=p)
else:
    tc.verdict("C019", "gpu-only", evidence="e", proof=p)
if not on_gpu:
    tc.verdict("C024", "gpu-only", evidence="e", proof=p)
else:
    tc.verdict("C024", "false", evidence="e", proof=p)
tc.verdict("C086", "true" if frag_on_gpu else "partly", evidence="e", proof=p)
tc.verdict("C083", chosen, evidence="e", proof=p)
"""
    got = verdict_calls(src)
    assert got["C001"] == {"cpu": {"false"}, "all": {"false"}}
    assert got["C019"] == {"cpu": {"gpu-only"}, "all": {"false", "gpu-only"}}
    assert got["C024"] == {"cpu": {"gpu-only"}, "all": {"false", "gpu-only"}}
    assert got["C086"] == {"cpu": {"partly"}, "all": {"true", "partly"}}
    assert got["C083"]["cpu"] is None


def test_the_cached_ledger_has_a_row_per_claim_and_says_how_it_was_made():
    with CACHE_CSV.open(encoding="utf-8") as fh:
        assert csv.DictReader(fh).fieldnames == COLUMNS
    rows = cached_rows()
    assert sorted(rows) == sorted(all_claims()), "the cache must have exactly one row per claim of the course data"
    assert all(r["verdict"] in set(VERDICTS) | {"not covered"} for r in rows.values())
    meta = cached_meta()
    assert meta["command"].startswith("torchcontracts ledger --cache") and meta["made"] and meta["seconds"]
    assert meta["covered"] == sum(r["verdict"] != "not covered" for r in rows.values())
    assert {r["torch"] for r in rows.values() if r["verdict"] != "not covered"} == {meta["torch"]}
    assert {r["device"] for r in rows.values() if r["verdict"] != "not covered"} == {"cpu"}, "the cache is a CPU run"


def stale_entries(rows: dict[str, dict[str, str]], meta: dict) -> list[str]:
    """How a cache differs from what the lessons it ran assert today (empty: in step)."""
    stale = []
    for name in meta["seconds"]:
        path = ROOT / "notebooks" / name
        if not path.exists():
            stale.append(f"{name} is in the cache but not in notebooks/")
            continue
        calls = lesson_verdicts(path)
        for cid, v in calls.items():
            row = rows.get(cid, {})
            if row.get("notebook") != name:
                stale.append(f"{cid}: {name} asserts it, the cache has it from {row.get('notebook') or 'no lesson'}")
            elif v["cpu"] is not None and row["verdict"] not in v["cpu"]:
                stale.append(f"{cid}: {name} asserts {sorted(v['cpu'])} on a CPU, the cache says {row['verdict']!r}")
        stale += [
            f"{cid}: cached from {name}, which no longer judges it"
            for cid, r in rows.items()
            if r["notebook"] == name and cid not in calls
        ]
    return stale


def test_the_cached_ledger_agrees_with_the_verdicts_the_lessons_assert():
    """Every lesson the cache ran still asserts exactly the cached verdicts on its CPU path (else: rerun the cache)."""
    stale = stale_entries(cached_rows(), cached_meta())
    assert not stale, "the cached ledger is stale: run `torchcontracts ledger --cache`\n" + "\n".join(stale)


def test_the_staleness_check_catches_a_changed_verdict_a_moved_claim_and_a_gpu_verdict():
    rows, meta = cached_rows(), cached_meta()
    assert "03_memory_contracts.ipynb" in meta["seconds"], "the cache does not hold lesson 03: run `ledger --cache`"
    changed = {**rows, "C022": {**rows["C022"], "verdict": "true"}}  # lesson 01 asserts false
    moved = {**rows, "C083": {**rows["C083"], "notebook": "02_autograd_engine.ipynb"}}
    on_gpu = {**rows, "C019": {**rows["C019"], "verdict": "false"}}  # lesson 03's CUDA branch
    assert any(p.startswith("C022:") for p in stale_entries(changed, meta))
    assert any(p.startswith("C083:") for p in stale_entries(moved, meta))
    assert any(p.startswith("C019:") for p in stale_entries(on_gpu, meta))


def test_every_claim_is_proved_by_exactly_one_lesson():
    judged_in: dict[str, list[str]] = {}
    for path in (ROOT / les.notebook for les in lessons()):
        for cid in lesson_verdicts(path):
            judged_in.setdefault(cid, []).append(path.name)
    twice = {cid: where for cid, where in judged_in.items() if len(where) > 1}
    unjudged = sorted(set(all_claims()) - set(judged_in))
    assert not twice, f"claims judged by more than one lesson: {twice}"
    assert not unjudged, f"claims no lesson judges: {unjudged}"


def test_the_cached_ledger_covers_all_124_claims():
    """Every lesson that owns claims is in the cache, and every claim has a verdict there.

    A lesson that owns no claim yet (a new one, just scaffolded) has no verdict to cache."""
    owning = [f"{les.stem}.ipynb" for les in lessons() if owned_by(les.number)]
    not_cached = [name for name in owning if name not in cached_meta()["seconds"]]
    rows = cached_rows()
    not_covered = sorted(cid for cid, r in rows.items() if r["verdict"] == "not covered")
    assert not not_cached, f"the cached ledger never ran {not_cached}: run `torchcontracts ledger --cache`"
    assert not not_covered, f"the cached ledger has no verdict for {not_covered}: run `torchcontracts ledger --cache`"


@pytest.mark.skipif(
    os.environ.get("TC_LEDGER_RERUN", "") in ("", "0"),
    reason="reruns every cached lesson (minutes): set TC_LEDGER_RERUN=1",
)
def test_a_fresh_ledger_run_agrees_exactly_with_the_cache(tmp_path):
    meta = cached_meta()
    out = tmp_path / "again.csv"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torchcontracts",
            "ledger",
            "--quiet",
            "--out",
            str(out),
            "--only",
            *sorted({name[:2] for name in meta["seconds"]}),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    again = {r["id"]: r["verdict"] for r in csv.DictReader(out.open(encoding="utf-8"))}
    cached = {cid: r["verdict"] for cid, r in cached_rows().items()}
    differ = {cid: (cached[cid], again[cid]) for cid in cached if cached[cid] != again.get(cid)}
    assert not differ, f"two ledger runs disagree (cached, fresh): {differ}"

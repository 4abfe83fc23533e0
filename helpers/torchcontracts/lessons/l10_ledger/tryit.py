"""Lesson 10's "Try it" exercises: reading the ledger as data (shares of verdicts; claims that depend on the device)."""

from __future__ import annotations

import math
from typing import Any

from torchcontracts.checks import Case, Check, Comparison
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES"]


def _verdict_lists(seed: int) -> list[Case]:
    return [
        Case(
            "a mix, with claims not covered yet",
            (
                [
                    "true",
                    "false",
                    "false",
                    "not covered",
                    "partly",
                    "false",
                    "not covered",
                    "gpu-only",
                    "true",
                    "outdated",
                ],
            ),
        ),
        Case("one verdict only", (["false", "false", "false"],)),
        Case("nothing judged yet", (["not covered", "not covered"],)),
    ]


def _shares_expected(verdicts: list[str]) -> dict[str, float]:
    judged = [v for v in verdicts if v != "not covered"]
    return {v: judged.count(v) / len(judged) for v in sorted(set(judged))}


def _judge_shares(case: Case, out: Any) -> list[Comparison]:
    want = _shares_expected(case.args[0])
    if not isinstance(out, dict):
        return [Comparison.plain("shares", False, "return a dict {verdict: share}", expected=want, got=out)]
    try:
        got = {str(k): float(v) for k, v in out.items()}
    except (TypeError, ValueError):
        return [Comparison.plain("shares", False, "the shares must be numbers", expected=want, got=out)]
    if "not covered" in got:
        status = "'not covered' is not a verdict: leave those claims out"
    elif set(got) != set(want):
        status = "the verdicts (keys) differ"
    elif not all(math.isclose(got[k], want[k], abs_tol=1e-9) for k in want):
        status = (
            "shares of the judged claims (they sum to 1), not counts"
            if any(v > 1 for v in got.values())
            else "wrong shares: divide by the number of judged claims"
        )
    else:
        return [Comparison.plain("shares", True, "right")]
    return [Comparison.plain("shares", False, status, expected=want, got=out)]


def _device_pairs(seed: int) -> list[Case]:
    cpu = {"C019": "gpu-only", "C022": "false", "C024": "gpu-only", "C083": "true", "C131": "partly"}
    cuda = {"C131": "partly", "C083": "true", "C024": "false", "C019": "false", "C007": "false"}  # another order
    return [
        Case("a record in another order, with a claim only the GPU judged", (cpu, cuda)),
        Case("the same verdicts", ({"C001": "false", "C002": "false"}, {"C002": "false", "C001": "false"})),
        Case("no claim in common", ({"C001": "false"}, {"C002": "true"})),
    ]


def _judge_differs(case: Case, out: Any) -> list[Comparison]:
    cpu, cuda = case.args
    want = sorted(k for k in cpu.keys() & cuda.keys() if cpu[k] != cuda[k])
    if not isinstance(out, list):
        status = "return a sorted list of ids" if not isinstance(out, (set, tuple)) else "return a list, sorted"
        return [Comparison.plain("ids", False, status, expected=want, got=out)]
    if out == want:
        return [Comparison.plain("ids", True, "right")]
    try:
        picked = set(out)
        in_order = sorted(out) == want
    except TypeError:  # lists or dicts inside: not ids
        return [Comparison.plain("ids", False, "return the claim ids, as strings", expected=want, got=out)]
    by_position = {a for (a, va), (_, vb) in zip(cpu.items(), cuda.items()) if va != vb}
    if in_order:
        status = "sort the ids"
    elif picked == by_position:
        status = "match claims by id, not by position"
    elif picked - (cpu.keys() & cuda.keys()):
        status = "an id that only one device judged does not differ: compare claims judged on both"
    else:
        status = "match claims by id, not by position"
    return [Comparison.plain("ids", False, status, expected=want, got=out)]


EXERCISES = exercises_by_id(
    [
        Exercise(
            "10.1",
            "shares of each verdict among the judged claims",
            "verdict_shares",
            (Check("10.1", "shares of judged claims", _verdict_lists, _judge_shares),),
            hint="drop 'not covered' first, then count each verdict and divide by how many are left",
        ),
        Exercise(
            "10.2",
            "claims whose verdict depends on the device",
            "differs_by_device",
            (Check("10.2", "ids judged on both devices, with different verdicts", _device_pairs, _judge_differs),),
            hint="take the ids in both dicts (cpu.keys() & cuda.keys()), keep those whose verdicts differ, sort them",
        ),
    ]
)

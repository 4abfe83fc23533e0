"""Lesson 03's "Try it" exercises: predict what the caching allocator charges, and what autograd saves.

03.1 asks for ``memory_allocated()`` and ``memory_reserved()`` after one tensor in a fresh allocator;
it is judged against ``torchcontracts.lessons.l03_memory.alloc`` (whose policy tests/test_alloc.py checks against a
transcription of ``CUDACachingAllocator.cpp``, and lesson 03 against the real allocator on a GPU).
03.2 asks for the bytes ``SavedTensorMeter`` reports for lesson 03's Linear/GELU stack, with and
without checkpointed segments; it is judged by running that stack here and measuring.
"""

from __future__ import annotations

import random
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from torchcontracts.lessons.l03_memory.alloc import KiB, MiB, AllocatorModel
from torchcontracts.checks import Case, Check, Comparison
from torchcontracts.lessons.l03_memory.memory import SavedTensorMeter
from torchcontracts.checks.tryit import Exercise, exercises_by_id

__all__ = ["EXERCISES", "measured_saved_bytes", "model_charge"]


def model_charge(size: int) -> tuple[int, int]:
    """(allocated, reserved) after one ``size``-byte request to a fresh allocator model."""
    m = AllocatorModel()
    m.malloc("t", size)
    return m.allocated, m.reserved


def _charge_cases(seed: int) -> list[Case]:
    fixed = [
        ("1 byte", 1),
        ("1000 B", 1000),
        ("300 KiB", 300 * KiB),
        ("exactly 1 MiB", MiB),
        ("1 MiB + 1 B", MiB + 1),
        ("3 MiB", 3 * MiB),
        ("19 MiB (1 MiB would remain)", 19 * MiB),
        ("19.5 MiB", 19 * MiB + 512 * KiB),
        ("exactly 10 MiB", 10 * MiB),
        ("21 MiB", 21 * MiB),
    ]
    rng = random.Random(seed)
    extra = [rng.randrange(2, MiB), rng.randrange(MiB + 1, 10 * MiB), rng.randrange(10 * MiB, 64 * MiB)]
    return [Case(label, (size,)) for label, size in fixed] + [Case(f"random {n:,} B", (n,)) for n in extra]


def _judge_charge(case: Case, out: Any) -> list[Comparison]:
    want = model_charge(case.args[0])
    try:
        got = tuple(int(v) for v in out)
    except (TypeError, ValueError):
        return [Comparison.plain("(allocated, reserved)", False, f"return a pair of ints, got {type(out).__name__}")]
    if got == want:
        return [Comparison.plain("(allocated, reserved)", True, "exact")]
    why = (
        "allocated is the block, not the tensor: 512 B rounding, and a block is not split when the rest is too small"
        if got[0] != want[0]
        else "reserved is the whole segment: 2 MiB, 20 MiB, or rounded to 2 MiB"
    )
    return [Comparison.plain("(allocated, reserved)", False, why, expected=want, got=got)]


def measured_saved_bytes(batch: int, width: int, depth: int, segments: int) -> int:
    """Bytes ``SavedTensorMeter`` reports for lesson 03's stack (input excluded), checkpointed in ``segments``."""
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(depth)])
    x = torch.randn(batch, width)
    with SavedTensorMeter(exclude=[model, x]) as meter:
        h = x
        if segments:
            n = depth // segments
            for s in range(segments):
                h = checkpoint(model[s * n : (s + 1) * n], h, use_reentrant=False)
        else:
            h = model(x)
        h.sum()
    return meter.bytes


def _saved_cases(seed: int) -> list[Case]:
    fixed = [(4, 8, 2, 0), (8, 16, 4, 0), (8, 16, 4, 2), (4, 32, 6, 3), (16, 8, 4, 4), (4, 8, 4, 1)]
    rng = random.Random(seed)
    fixed.append((rng.choice([2, 4, 8]), rng.choice([8, 16]), rng.choice([4, 6, 8]), rng.choice([0, 1, 2])))
    return [Case(f"batch {b}, width {w}, depth {d}, segments {k}", (b, w, d, k)) for b, w, d, k in fixed]


def _judge_saved(case: Case, out: Any) -> list[Comparison]:
    want = measured_saved_bytes(*case.args)
    if not isinstance(out, int) or isinstance(out, bool):
        return [Comparison.plain("saved bytes", False, f"return an int (bytes), got {type(out).__name__}")]
    if out == want:
        return [Comparison.plain("saved bytes", True, "exact")]
    segments = case.args[3]
    why = (
        "with checkpointing only the segment inputs are saved, and the first one is x (excluded)"
        if segments
        else "each Linear saves its input and each GELU its input; x is excluded"
    )
    return [Comparison.plain("saved bytes", False, why, expected=want, got=out)]


EXERCISES = exercises_by_id(
    [
        Exercise(
            id="03.1",
            title="what one tensor costs the caching allocator",
            target="allocator_charge",
            checks=(Check("03.1", "allocated and reserved bytes", _charge_cases, _judge_charge),),
            hint="follow the table at the start of Part B: round the size, pick the pool and the segment, then "
            "decide whether the block is split (if not, the whole block counts as allocated)",
        ),
        Exercise(
            id="03.2",
            title="saved activations, with and without checkpointing",
            target="saved_activation_bytes",
            checks=(Check("03.2", "saved bytes", _saved_cases, _judge_saved),),
            hint="count activations of batch * width * 4 bytes: what does each Linear and each GELU save, and what "
            "does a checkpointed segment keep from its forward?",
        ),
    ]
)

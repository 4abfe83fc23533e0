"""Lesson 03's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason.

The references live here only, never in the notebook. 03.1's reference is written from the rules in the
lesson's table (not by calling the model the checker uses), so a drift between the two would show here.
"""

from __future__ import annotations

from torchcontracts.lessons.l03_memory.alloc import KiB, MiB
from torchcontracts.lessons.l03_memory.tryit import EXERCISES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# 03.1: what one tensor costs --------------------------------------------------------------------


def allocator_charge(size: int) -> tuple[int, int]:
    rounded = max(512, -(-size // 512) * 512)
    if rounded <= MiB:
        segment, split = 2 * MiB, 2 * MiB - rounded >= 512
    elif rounded < 10 * MiB:
        segment, split = 20 * MiB, 20 * MiB - rounded > MiB
    else:
        segment = -(-rounded // (2 * MiB)) * (2 * MiB)
        split = segment - rounded > MiB
    return (rounded if split else segment), segment


def test_charge_reference_passes():
    ok, reason = _ok("03.1", allocator_charge)
    assert ok, reason


def test_charge_tensor_bytes_instead_of_blocks_fails_and_says_blocks():
    ok, reason = _ok("03.1", lambda n: (n, allocator_charge(n)[1]))
    assert not ok and "allocated is the block" in reason and "expected" in reason


def test_charge_always_splitting_fails_on_the_unsplit_remainder_cases():
    def always_split(n):
        rounded = max(512, -(-n // 512) * 512)
        return rounded, allocator_charge(n)[1]

    ok, reason = _ok("03.1", always_split)
    assert not ok and "allocated is the block" in reason


def test_charge_one_segment_size_for_everything_fails_on_reserved():
    ok, reason = _ok("03.1", lambda n: (allocator_charge(n)[0], 20 * MiB))
    assert not ok and "reserved is the whole segment" in reason


def test_charge_power_of_two_classes_fail():
    ok, _ = _ok("03.1", lambda n: (1 << (max(n, 512) - 1).bit_length(),) * 2)
    assert not ok


def test_charge_odd_answers_fail_in_one_line_and_never_crash():
    for wrong in (lambda n: None, lambda n: "20MiB", lambda n: (1,), lambda n: 1 / 0):
        outs = EXERCISES["03.1"].run(wrong)
        assert not all(o.ok for o in outs) and all("\n" not in o.reason for o in outs)


def test_charge_edge_cases_in_the_check_include_the_split_rule_boundaries():
    labels = {c.label for c in EXERCISES["03.1"].checks[0].cases(0)}
    assert {"exactly 1 MiB", "1 MiB + 1 B", "19 MiB (1 MiB would remain)", "exactly 10 MiB"} <= labels
    assert allocator_charge(19 * MiB) == (20 * MiB, 20 * MiB) and allocator_charge(300 * KiB) == (300 * KiB, 2 * MiB)


# 03.2: saved activations -------------------------------------------------------------------------


def saved_activation_bytes(batch: int, width: int, depth: int, segments: int) -> int:
    act = batch * width * 4
    if not segments:
        return (2 * depth - 1) * act  # each Linear and each GELU save their input; x is excluded
    return (segments - 1) * act  # only the segment inputs; the first one is x


def test_saved_reference_passes():
    ok, reason = _ok("03.2", saved_activation_bytes)
    assert ok, reason


def test_saved_counting_x_fails_and_says_it_is_excluded():
    ok, reason = _ok("03.2", lambda b, w, d, k: saved_activation_bytes(b, w, d, k) + b * w * 4)
    assert not ok and "excluded" in reason


def test_saved_ignoring_checkpointing_fails():
    ok, reason = _ok("03.2", lambda b, w, d, k: saved_activation_bytes(b, w, d, 0))
    assert not ok and "segment inputs" in reason


def test_saved_only_linear_inputs_fails():
    ok, _ = _ok("03.2", lambda b, w, d, k: (d - 1) * b * w * 4 if not k else saved_activation_bytes(b, w, d, k))
    assert not ok


def test_saved_a_float_or_a_tensor_is_refused_in_one_line():
    outs = EXERCISES["03.2"].run(lambda b, w, d, k: float(saved_activation_bytes(b, w, d, k)))
    assert not all(o.ok for o in outs) and all("\n" not in o.reason for o in outs)

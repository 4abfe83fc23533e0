"""Lesson 07's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason."""

from __future__ import annotations

import torch

from torchcontracts.lessons.l07_compile.tryit import EXERCISES, clip_scale_with_breaks


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


def clip_scale(x):
    return torch.tanh(x / x.abs().max().clamp(min=1.0)) * 2


def predict_compiles(sizes, dynamic):
    """Replay dynamo's rules: static first, symbolic after a size change (or at once), sizes 0 and 1 their own."""
    graphs: list = []
    for n in sizes:
        if any(g == n or (g == "symbolic" and n >= 2) for g in graphs):
            continue
        if dynamic is False or (dynamic is None and not graphs) or n in (0, 1):
            graphs.append(n)
        else:
            graphs.append("symbolic")
    return len(graphs)


def mlp_flops(batch, sizes, backward):
    forward = sum(2 * batch * a * b for a, b in zip(sizes, sizes[1:]))
    return 3 * forward - 2 * batch * sizes[0] * sizes[1] if backward else forward


def test_references_pass():
    for ex_id, fn in (("07.1", clip_scale), ("07.2", predict_compiles), ("07.3", mlp_flops)):
        ok, reason = _ok(ex_id, fn)
        assert ok, f"{ex_id}: {reason}"


def test_clip_scale_accepts_torch_where():
    def with_where(x):
        peak = x.abs().max()
        return torch.tanh(torch.where(peak > 1.0, x / peak, x)) * 2

    assert _ok("07.1", with_where)[0]


def test_clip_scale_wrong_answers_fail_with_a_reason():
    ok, reason = _ok("07.1", clip_scale_with_breaks)  # right values, still breaks
    assert not ok and "dynamo still breaks" in reason and "expected 1 graph, 0 breaks" in reason, reason

    def item_only(x):  # .item() without the if: still a break
        return torch.tanh(x / max(x.abs().max().item(), 1.0)) * 2

    ok, reason = _ok("07.1", item_only)
    assert not ok and "dynamo still breaks" in reason, reason
    ok, reason = _ok("07.1", lambda x: torch.tanh(x / x.abs().max()) * 2)  # always divides: wrong below a peak of 1
    assert not ok and "values differ" in reason and "peak below 1" in reason, reason
    ok, reason = _ok("07.1", lambda x: torch.tanh(x) * 2)  # never scales
    assert not ok and "values differ" in reason and "peak above 1" in reason, reason


def test_predict_compiles_wrong_answers_fail_with_a_hint():
    ok, reason = _ok("07.2", lambda sizes, dynamic: len(set(sizes)))  # dynamic=False's rule everywhere
    assert not ok and "expected 2, got 3" in reason and "dynamic=False" in reason, reason
    ok, reason = _ok("07.2", lambda sizes, dynamic: 1)
    assert not ok and "expected" in reason, reason

    def ignores_size_one(sizes, dynamic):
        return predict_compiles([n for n in sizes if n not in (0, 1)] or sizes, dynamic)

    ok, reason = _ok("07.2", ignores_size_one)
    assert not ok and "sizes 0 and 1 are special" in reason, reason
    ok, reason = _ok("07.2", lambda sizes, dynamic: float(predict_compiles(sizes, dynamic)))
    assert not ok and "return an int" in reason, reason


def test_mlp_flops_wrong_answers_fail_with_a_named_mistake():
    def macs(batch, sizes, backward):  # multiply-adds, not FLOPs
        return mlp_flops(batch, sizes, backward) // 2

    def with_bias(batch, sizes, backward):
        return mlp_flops(batch, sizes, backward) + batch * sum(sizes[1:])

    def triple(batch, sizes, backward):  # backward = 2 x forward, everywhere
        forward = mlp_flops(batch, sizes, False)
        return 3 * forward if backward else forward

    for fn, words in (
        (macs, "multiply-add is 2 FLOPs"),
        (with_bias, "not the bias adds"),
        (triple, "first layer's backward skips one matmul"),
    ):
        ok, reason = _ok("07.3", fn)
        assert not ok and words in reason and "expected" in reason, (fn.__name__, reason)


def test_stubs_get_a_nudge_not_a_traceback():
    def stub(*args):
        raise NotImplementedError

    for ex_id in ("07.1", "07.2", "07.3"):
        ok, reason = _ok(ex_id, stub)
        assert not ok and "not implemented yet" in reason, reason

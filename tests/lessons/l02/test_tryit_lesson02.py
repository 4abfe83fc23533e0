"""Lesson 02's Try-it checkers pass the reference answers and fail the common wrong answers, with a reason."""

from __future__ import annotations

import torch

from torchcontracts.lessons.l02_autograd.tryit import EXERCISES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# 02.1 ------------------------------------------------------------------------------------------


def _clamp_function(mask):
    class Clamp(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, lo, hi):
            ctx.save_for_backward(x)
            ctx.lo, ctx.hi = lo, hi
            return x.clamp(lo, hi)

        @staticmethod
        def backward(ctx, grad_out):
            (x,) = ctx.saved_tensors
            return mask(grad_out, x, ctx.lo, ctx.hi), None, None

    return lambda x, lo, hi: Clamp.apply(x, lo, hi)


my_clamp = _clamp_function(lambda g, x, lo, hi: g * ((x >= lo) & (x <= hi)).to(g.dtype))  # the reference


def test_clamp_reference_passes():
    assert _ok("02.1", my_clamp) == (True, "all cases pass")


def test_clamp_strict_boundary_fails_and_says_so():
    strict = _clamp_function(lambda g, x, lo, hi: g * ((x > lo) & (x < hi)).to(g.dtype))
    ok, reason = _ok("02.1", strict)
    assert not ok and "boundary" in reason and "x == lo" in reason, reason


def test_clamp_wrong_backwards_fail_with_expected_vs_got():
    for wrong in (
        _clamp_function(lambda g, x, lo, hi: g),  # straight through
        _clamp_function(lambda g, x, lo, hi: ((x >= lo) & (x <= hi)).to(g.dtype)),
    ):  # ignores grad_out
        ok, reason = _ok("02.1", wrong)
        assert not ok and "gradient" in reason and "expected" in reason, reason


def test_clamp_builtin_op_is_not_a_custom_function():
    ok, reason = _ok("02.1", lambda x, lo, hi: torch.clamp(x, lo, hi))
    assert not ok and "torch.autograd.Function" in reason, reason


def test_clamp_missing_none_gradients_reports_the_autograd_error():
    class TooFew(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, lo, hi):
            return x.clamp(lo, hi)

        @staticmethod
        def backward(ctx, grad_out):
            return grad_out

    ok, reason = _ok("02.1", lambda x, lo, hi: TooFew.apply(x, lo, hi))
    assert not ok and "incorrect number of gradients" in reason, reason


def test_clamp_detached_output_fails_without_a_traceback():
    ok, reason = _ok("02.1", lambda x, lo, hi: x.detach().clamp(lo, hi))
    assert not ok and "grad_fn" in reason, reason


# 02.2 ------------------------------------------------------------------------------------------


def clip_grad_hook(t, bound):
    return t.register_hook(lambda g: g.clamp(-bound, bound))


def test_hook_reference_passes():
    assert _ok("02.2", clip_grad_hook) == (True, "all cases pass")


def test_hook_that_returns_nothing_has_no_effect_and_fails():
    def no_return(t, bound):
        def hook(g):
            g.clamp(-bound, bound)  # computed, then thrown away

        return t.register_hook(hook)

    ok, reason = _ok("02.2", no_return)
    assert not ok and "with the hook" in reason and "expected" in reason, reason


def test_hook_wrong_range_or_lost_handle_fails():
    ok, reason = _ok("02.2", lambda t, b: t.register_hook(lambda g: g.clamp(0, b)))
    assert not ok and "with the hook" in reason, reason
    ok, reason = _ok("02.2", lambda t, b: (t.register_hook(lambda g: g.clamp(-b, b)), None)[1])
    assert not ok and "return the handle" in reason, reason


# 02.3 ------------------------------------------------------------------------------------------


def count_nodes(t):
    seen, stack = set(), [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        stack.extend(n for n, _ in node.next_functions if n is not None)
    return len(seen)


def test_count_reference_passes():
    assert _ok("02.3", count_nodes) == (True, "all cases pass")


def test_count_tree_walk_counts_the_diamond_twice():
    def tree(t):
        def walk(node):
            return 0 if node is None else 1 + sum(walk(n) for n, _ in node.next_functions)

        return walk(t.grad_fn)

    ok, reason = _ok("02.3", tree)
    assert not ok and "diamond" in reason and "counted twice" in reason, reason


def test_count_without_accumulate_grad_or_with_none_edges_fails():
    def no_leaves(t):
        return len([n for n in _nodes(t) if not hasattr(n, "variable")])  # AccumulateGrad has .variable

    ok, reason = _ok("02.3", no_leaves)
    assert not ok and "AccumulateGrad" in reason and "expected 2, got 1" in reason, reason

    def counts_none(t):
        seen, stack = set(), [t.grad_fn]
        while stack:
            node = stack.pop()
            if node not in seen:
                seen.add(node)
                stack.extend(n for n, _ in node.next_functions) if node is not None else None
        return len(seen)  # None (a leaf's grad_fn, a data input's edge) counted as a node

    ok, reason = _ok("02.3", counts_none)
    assert not ok and "None edge" in reason and "expected 0, got 1" in reason, reason


def _nodes(t):
    seen, stack = [], [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if node not in seen:
            seen.append(node)
            stack.extend(n for n, _ in node.next_functions if n is not None)
    return seen


def test_stubs_get_a_nudge_not_a_traceback(capsys):
    def stub(*args):
        raise NotImplementedError

    for ex_id in ("02.1", "02.2", "02.3"):
        stub.__name__ = EXERCISES[ex_id].target
        assert EXERCISES[ex_id].check(stub) is False
        out = capsys.readouterr().out
        assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out

"""Lesson 01's proof predicates can fail: each returns False on the behaviour the seed describes
(measured from an op that behaves the seed's way, or a stub) and True on what torch really does.

The predicates and the measuring helpers are loaded from the notebook itself, so these tests check
the very functions the claim cells call.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

from conftest import ROOT, notebook_functions

NB = ROOT / "notebooks" / "01_tensor_contracts.ipynb"
FNS = notebook_functions(
    NB,
    "proof_c021",
    "copies_inside",
    "layout_report",
    "proof_c137",
    "proof_c082",
    "view_facts",
    "proof_c031",
    "to_facts",
)


# C021: contiguity is not a requirement; some kernels copy, the core ones read strides ------------


def _ops(n: int, m: torch.Tensor) -> dict:
    w = torch.randn(4, n, 3)
    return {
        "+ 1": lambda t: t + 1,
        "exp": torch.exp,
        ".sum(1)": lambda t: t.sum(1),
        "@ m": lambda t: t @ m,
        "softmax(1)": lambda t: t.softmax(1),
        "conv1d": lambda t: F.conv1d(t[None], w),
    }


def test_c021_holds_on_what_torch_does():
    n = 64
    m = torch.randn(n, n)
    report = FNS["layout_report"](_ops(n, m), m.t())
    assert FNS["proof_c021"](report), report
    assert report["softmax(1)"]["extra copies"] == 1 and report["+ 1"]["extra copies"] == 0


def test_c021_fails_when_every_kernel_demands_contiguous_input():
    n = 64
    m = torch.randn(n, n)
    demanding = {k: (lambda f: lambda t: f(t.contiguous()))(f) for k, f in _ops(n, m).items()}
    report = FNS["layout_report"](demanding, m.t())  # the seed's world, measured: a copy before each kernel
    assert all(r["extra copies"] == 1 for r in report.values()), report
    assert not FNS["proof_c021"](report)


def test_c021_fails_when_ops_refuse_strided_input():
    n = 64
    m = torch.randn(n, n)

    def refuse(f):
        def op(t):
            if not t.is_contiguous():
                raise RuntimeError("input must be contiguous")
            return f(t)

        return op

    report = FNS["layout_report"]({k: refuse(f) for k, f in _ops(n, m).items()}, m.t())
    assert not any(r["runs on the strided input"] for r in report.values())
    assert not FNS["proof_c021"](report)


def test_c021_fails_when_nothing_ever_copies():
    """'partly' needs the half the seed gets right too: with no kernel copying, the verdict would be 'false'."""
    free = {
        k: {"runs on the strided input": True, "same result": True, "extra copies": 0}
        for k in ["+ 1", "exp", ".sum(1)", "@ m", "softmax(1)"]
    }
    assert not FNS["proof_c021"](free)


# C137: bool today, uint8 once ----------------------------------------------------------------


def _traces() -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.arange(3)[torch.tensor([1, 0, 1], dtype=torch.uint8)]
    return [str(w.message) for w in caught]


def test_c137_holds_on_this_torch():
    observed = {
        "torch.tensor([True, False]).dtype": torch.tensor([True, False]).dtype,
        "(x > 0).dtype": (torch.arange(3) > 0).dtype,
        "uint8 traces": _traces(),
    }
    assert FNS["proof_c137"](observed)


def test_c137_fails_for_a_torch_that_behaves_the_old_way():
    old = {"torch.tensor([True, False]).dtype": torch.uint8, "(x > 0).dtype": torch.uint8, "uint8 traces": []}
    assert not FNS["proof_c137"](old)
    half_old = {**old, "(x > 0).dtype": torch.bool, "uint8 traces": _traces()}  # bool comparisons, uint8 inference
    assert not FNS["proof_c137"](half_old)


def test_c137_fails_without_a_trace_of_the_old_dtype():
    """Bool today but no sign uint8 was ever the answer would make the claim 'false', not 'outdated'."""
    never = {"torch.tensor([True, False]).dtype": torch.bool, "(x > 0).dtype": torch.bool, "uint8 traces": []}
    assert not FNS["proof_c137"](never)


# C082: a new header over the same storage ------------------------------------------------------


def test_c082_holds_for_view():
    assert FNS["proof_c082"](FNS["view_facts"](lambda x: x.view(2, 3)))


def test_c082_fails_for_a_copy_and_for_a_reshape_of_x_itself():
    assert not FNS["proof_c082"](FNS["view_facts"](lambda x: x.reshape(2, 3).clone()))  # a copy: own storage
    assert not FNS["proof_c082"](FNS["view_facts"](lambda x: x.resize_(2, 3)))  # one header, reshaped


# C031: .to() where a tensor already is copies nothing --------------------------------------------


def _facts(to_same_device) -> dict:
    x = torch.randn(32, 32)
    to_facts = FNS["to_facts"]
    return {
        "to('cpu')": to_facts(x, to_same_device),
        ".cpu()": to_facts(x, lambda t: t.cpu()),
        "contiguous()": to_facts(x, lambda t: t.contiguous()),
        "to(float64): a real cast": to_facts(x, lambda t: t.to(torch.float64)),
    }


def test_c031_holds_on_what_torch_does():
    assert FNS["proof_c031"](_facts(lambda t: t.to("cpu")))


def test_c031_fails_when_each_to_call_copies():
    facts = _facts(lambda t: t.to("cpu", copy=True))  # the seed's picture, measured with copy=True
    assert facts["to('cpu')"] == {"returned x itself": 0, "new storages": 10}
    assert not FNS["proof_c031"](facts)


def test_c031_fails_when_a_real_cast_does_not_copy():
    facts = _facts(lambda t: t.to("cpu"))
    facts["to(float64): a real cast"] = FNS["to_facts"](torch.randn(4), lambda t: t)  # a 'cast' that is a no-op
    assert not FNS["proof_c031"](facts)

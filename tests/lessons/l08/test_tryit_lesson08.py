"""Lesson 08's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason."""

from __future__ import annotations

import torch
import torch.nn as nn

from torchcontracts.lessons.l08_deploy.tryit import EXERCISES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


class _Scaler(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.register_buffer("scale", scale.clone())

    def forward(self, x):
        return x * self.scale


def make_scaler(scale):
    return _Scaler(scale)


def int8_weight_bytes(in_features, out_features):
    return in_features * out_features + 4 * out_features + out_features  # int8 values, fp32 scales, int8 zero points


def serve(model, requests):
    was = model.training
    model.eval()
    with torch.inference_mode():
        out = model(torch.cat(requests))
    model.train(was)
    return list(out.split(1))


def test_references_pass():
    for ex_id, fn in (("08.1", make_scaler), ("08.2", int8_weight_bytes), ("08.3", serve)):
        ok, reason = _ok(ex_id, fn)
        assert ok, f"{ex_id}: {reason}"


def test_make_scaler_wrong_answers_name_what_breaks():
    class Plain(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale.clone()

        def forward(self, x):
            return x * self.scale

    class Param(Plain):
        def __init__(self, scale):
            nn.Module.__init__(self)
            self.scale = nn.Parameter(scale.clone())

    class NonPersistent(Plain):
        def __init__(self, scale):
            nn.Module.__init__(self)
            self.register_buffer("scale", scale.clone(), persistent=False)

    class Adds(_Scaler):
        def forward(self, x):
            return x + self.scale

    for cls, words in (
        (Plain, "state_dict() does not have it"),
        (Param, "nn.Parameter"),
        (NonPersistent, "persistent=False"),
        (Adds, "values differ"),
    ):
        ok, reason = _ok("08.1", cls)
        assert not ok and words in reason, (cls.__name__, reason)
    ok, reason = _ok("08.1", lambda s: "not a module")
    assert not ok and "nn.Module" in reason


def test_plain_attribute_is_reported_as_not_moved():
    class Plain(nn.Module):
        def __init__(self, scale):
            super().__init__()
            self.scale = scale.clone()

        def forward(self, x):
            return x * self.scale

    rows = [r for o in EXERCISES["08.1"].run(Plain) for r in o.rows]
    moved = [r for r in rows if r.name.endswith("moved by .to()")]
    assert moved and not moved[0].ok and "not moved" in moved[0].status


def test_int8_weight_bytes_wrong_answers_get_a_named_hint():
    wrong = {
        "values only": (lambda i, o: i * o, "int8 values alone"),
        "the fp32 weight": (lambda i, o: 4 * i * o, "float32 weight"),
        "no zero points": (lambda i, o: i * o + 4 * o, "zero points"),
        "one scale": (lambda i, o: i * o + 5, "per output row"),
        "with the bias": (lambda i, o: i * o + 9 * o, "bias"),
        "a float": (lambda i, o: float(int8_weight_bytes(i, o)), "return an int"),
    }
    for name, (fn, words) in wrong.items():
        ok, reason = _ok("08.2", fn)
        assert not ok and words in reason, (name, reason)


def test_serve_wrong_answers_fail_for_the_right_reason():
    def no_eval(model, requests):
        with torch.inference_mode():
            return list(model(torch.cat(requests)).split(1))

    def one_by_one(model, requests):
        was = model.training
        model.eval()
        with torch.inference_mode():
            out = [model(r) for r in requests]
        model.train(was)
        return out

    def with_graph(model, requests):
        was = model.training
        model.eval()
        out = list(model(torch.cat(requests)).split(1))
        model.train(was)
        return out

    def left_in_eval(model, requests):
        model.eval()
        with torch.inference_mode():
            return list(model(torch.cat(requests)).split(1))

    for fn, words in (
        (no_eval, "eval mode"),
        (one_by_one, "forward calls"),
        (with_graph, "carry a graph"),
        (left_in_eval, "restore it"),
    ):
        ok, reason = _ok("08.3", fn)
        assert not ok and words in reason, (fn.__name__, reason)
    ok, reason = _ok("08.3", lambda model, requests: None)
    assert not ok and "one output per request" in reason


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def serve(model, requests):
        raise NotImplementedError

    assert EXERCISES["08.3"].check(serve) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out

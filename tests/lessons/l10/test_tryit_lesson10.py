"""Lesson 10's Try-it checkers pass the reference and fail the common wrong answers, each with its reason."""

from __future__ import annotations

from collections import Counter

from torchcontracts.lessons.l10_ledger.tryit import EXERCISES


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


def verdict_shares(verdicts):
    judged = [v for v in verdicts if v != "not covered"]
    return {v: n / len(judged) for v, n in Counter(judged).items()}


def differs_by_device(cpu, cuda):
    return sorted(k for k in cpu.keys() & cuda.keys() if cpu[k] != cuda[k])


def test_references_pass():
    assert _ok("10.1", verdict_shares)[0], _ok("10.1", verdict_shares)[1]
    assert _ok("10.2", differs_by_device)[0], _ok("10.2", differs_by_device)[1]


def test_a_pandas_answer_passes_too():
    import pandas as pd

    def shares(verdicts):
        s = pd.Series(verdicts)
        return s[s != "not covered"].value_counts(normalize=True).to_dict()

    assert _ok("10.1", shares)[0]


def test_verdict_shares_wrong_answers_fail_with_the_reason():
    cases = {
        "not covered": lambda v: {k: n / len(v) for k, n in Counter(v).items()},  # keeps "not covered"
        "not counts": lambda v: dict(Counter(x for x in v if x != "not covered")),  # counts, not shares
        "judged claims": lambda v: {k: n / len(v) for k, n in Counter(x for x in v if x != "not covered").items()},
        "dict": lambda v: sorted(set(v)),  # not a dict
    }
    for reason, wrong in cases.items():
        ok, got = _ok("10.1", wrong)
        assert not ok and reason in got, (reason, got)


def test_differs_by_device_wrong_answers_fail_with_the_reason():
    cases = {
        "only one device": lambda cpu, cuda: sorted(k for k in cpu.keys() | cuda.keys() if cpu.get(k) != cuda.get(k)),
        "by id, not by position": lambda cpu, cuda: sorted(
            a for (a, va), (b, vb) in zip(cpu.items(), cuda.items()) if va != vb
        ),
        "sort": lambda cpu, cuda: [k for k in sorted(cpu.keys() & cuda.keys(), reverse=True) if cpu[k] != cuda[k]],
        "list": lambda cpu, cuda: {k for k in cpu.keys() & cuda.keys() if cpu[k] != cuda[k]},  # a set
        "as strings": lambda cpu, cuda: [[k] for k in cpu],
    }
    for reason, wrong in cases.items():
        ok, got = _ok("10.2", wrong)
        assert not ok and reason in got, (reason, got)


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def differs_by_device(cpu, cuda):
        raise NotImplementedError

    assert EXERCISES["10.2"].check(differs_by_device) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out

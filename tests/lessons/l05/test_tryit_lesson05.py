"""Lesson 05's Try-it checkers pass the reference answers and fail the common wrong ones, with a reason.

The checkers run the learner's function in real fork workers, so these tests also check that a
function that raises inside a worker ends its workers (the autouse fixture looks for leftovers).
"""

from __future__ import annotations


import numpy as np
import pytest
import torch
from torch.utils.data import get_worker_info

from torchcontracts.lessons.l05_data.data_pipeline import seed_worker
from torchcontracts.lessons.l05_data.tryit import EXERCISES


pytestmark = pytest.mark.usefixtures("no_dataloader_worker_left")  # conftest: fails a test that leaks one


def _ok(ex_id: str, fn) -> tuple[bool, str]:
    outs = EXERCISES[ex_id].run(fn)
    return all(o.ok for o in outs), "; ".join(o.reason for o in outs)


# Reference answers: they live here only, never in the notebook.


def shard(n, worker_id, num_workers):
    return range(worker_id, n, num_workers)


def init_worker(worker_id):
    get_worker_info().dataset.gen.manual_seed(torch.initial_seed())


def test_references_pass():
    for ex_id, fn in (("05.1", shard), ("05.2", init_worker)):
        ok, reason = _ok(ex_id, fn)
        assert ok, f"{ex_id}: {reason}"


def test_shard_accepts_contiguous_blocks_and_lists():
    def blocks(n, w, k):
        size = -(-n // k)
        return list(range(w * size, min(n, (w + 1) * size)))

    assert _ok("05.1", blocks)[0]


def test_shard_wrong_answers_fail_and_say_what_went_wrong():
    ok, reason = _ok("05.1", lambda n, w, k: range(n))  # no sharding at all
    assert not ok and "came 2 times" in reason and "worker_id and num_workers" in reason, reason
    ok, reason = _ok("05.1", lambda n, w, k: range(w * (n // k), (w + 1) * (n // k)))  # floor blocks lose the tail
    assert not ok and "never came" in reason and "tail" in reason, reason
    ok, reason = _ok("05.1", lambda n, w, k: range(w + 1, n + 1, k))  # off by one
    assert not ok and ("outside range" in reason or "never came" in reason), reason


def test_shard_that_raises_inside_a_worker_is_one_line_and_leaves_no_worker():
    def breaks_in_workers(n, w, k):
        if k > 1:
            raise ZeroDivisionError("oops")
        return range(n)

    ok, reason = _ok("05.1", breaks_in_workers)
    assert not ok and "raised ZeroDivisionError" in reason and "(case: 2 workers" in reason, reason


def test_init_worker_wrong_answers_fail_with_the_named_mistake():
    cases = {
        "the seed's recipe (does not touch self.gen)": (lambda w: torch.manual_seed(42 + w), "workers differ"),
        "the package's seed_worker (knows self.rng, not self.gen)": (seed_worker, "workers differ"),
        "numpy only": (lambda w: np.random.seed(w), "workers differ"),
        "seeded from worker_id": (lambda w: get_worker_info().dataset.gen.manual_seed(w), "replay every epoch"),
        "seeded from the OS": (lambda w: get_worker_info().dataset.gen.seed(), "rerun"),
    }
    for name, (fn, why) in cases.items():
        ok, reason = _ok("05.2", fn)
        assert not ok and why in reason, (name, reason)


def test_a_stub_gets_a_nudge_not_a_traceback(capsys):
    def init_worker(worker_id):
        raise NotImplementedError

    assert EXERCISES["05.2"].check(init_worker) is False
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Hint:" in out and "Traceback" not in out

    def shard(n, worker_id, num_workers):
        raise NotImplementedError

    assert EXERCISES["05.1"].check(shard) is False
    assert "not implemented yet" in capsys.readouterr().out

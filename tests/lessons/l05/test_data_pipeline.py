"""Lesson 05's package code: the seeding recipe, the worker meters, the importable datasets, the throughput tables.

Every test that starts DataLoader workers uses ``fork`` and two workers at most, and the autouse
fixture checks that no worker (a process named ``pt_data_worker``) outlives a test.
"""

from __future__ import annotations

import pickle
import random
import time

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from torchcontracts.lessons.l05_data.data_pipeline import (
    PARENT_MARK,
    DrawDataset,
    ModuleDataset,
    ShardedStream,
    close_workers,
    dataloader_workers,
    descendants,
    process_memory,
    record_draws,
    seed_worker,
    seeded_loader,
    worker_iter,
)
from torchcontracts.lessons.l05_data.throughput import (
    EpochTimes,
    plot_stages,
    plot_throughput,
    throughput_table,
    time_epochs,
)
from torchcontracts.core.timing import Timing


pytestmark = pytest.mark.usefixtures("no_dataloader_worker_left")  # conftest: fails a test that leaks one


def _loader(ds, **kw):
    return DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context="fork", **kw)


# worker processes -----------------------------------------------------------------------------


def test_process_memory_reads_rss_and_the_private_part_of_it():
    mem = process_memory()
    assert mem.rss is not None and mem.uss is not None and mem.rss >= mem.uss > 0
    assert process_memory(10**9).rss is None  # no such process: no numbers, no traceback


def test_persistent_workers_are_found_while_alive_and_gone_after_close_workers():
    loader = _loader(DrawDataset(4), persistent_workers=True)
    pids = {item["worker"] for item in loader}
    live = dataloader_workers()
    assert pids == {0, 1} and len(live) == 2 and set(live) <= set(descendants())
    close_workers(loader)
    assert dataloader_workers() == [] and loader._iterator is None
    assert sorted(item["index"] for item in loader) == [0, 1, 2, 3]  # the loader still works: new workers
    close_workers(loader)


def test_worker_iter_ends_workers_after_a_break_and_after_an_exception():
    with worker_iter(_loader(DrawDataset(64))) as it:
        next(it)
        # a worker takes its name (pt_data_worker) when its loop starts: on a loaded machine the second one may
        # not have started when the first batch is back
        deadline = time.monotonic() + 30
        while len(dataloader_workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(dataloader_workers()) == 2
    assert dataloader_workers() == []

    class Fails(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise ValueError("bad sample")

    with pytest.raises(ValueError, match="bad sample"):
        with worker_iter(_loader(Fails())) as it:
            list(it)
    assert dataloader_workers() == []


# the seeding recipe ---------------------------------------------------------------------------


def _draws(seed, **kw):
    return record_draws(
        seeded_loader(
            DrawDataset(8),
            seed=seed,
            batch_size=None,
            shuffle=True,
            num_workers=2,
            multiprocessing_context="fork",
            **kw,
        ),
        epochs=2,
    )


def _by(frame, column, epoch, worker):
    rows = frame[(frame.epoch == epoch) & (frame.worker == worker)]
    return rows[column].tolist()


def test_seeded_loader_repeats_every_draw_and_the_order_on_a_rerun_and_changes_with_the_seed():
    a, b, c = _draws(3), _draws(3), _draws(4)
    assert a.equals(b)
    assert a["index"].tolist() != c["index"].tolist() and a["self.rng"].tolist() != c["self.rng"].tolist()


@pytest.mark.parametrize("column", ["torch", "random", "np.random", "self.rng"])
def test_seed_worker_gives_every_rng_its_own_stream_per_worker_and_per_epoch(column):
    d = _draws(5)
    assert not set(_by(d, column, 0, 0)) & set(_by(d, column, 0, 1))
    assert not set(_by(d, column, 0, 0)) & set(_by(d, column, 1, 0))


def test_without_the_recipe_a_generator_made_in_init_repeats_in_every_worker():
    d = record_draws(_loader(DrawDataset(8), generator=torch.Generator().manual_seed(5)))
    assert _by(d, "self.rng", 0, 0) == _by(d, "self.rng", 0, 1) == _by(d, "self.rng", 1, 0)
    assert not set(_by(d, "torch", 0, 0)) & set(_by(d, "torch", 0, 1))


def test_seed_worker_in_the_main_process_seeds_random_and_numpy_from_torch_initial_seed():
    states = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng():
            torch.manual_seed(11)
            seed_worker(0)
            first = (random.random(), np.random.random())
            torch.manual_seed(11)
            seed_worker(0)
            assert (random.random(), np.random.random()) == first
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])


def test_module_dataset_leaves_the_global_rng_alone():
    before = torch.random.get_rng_state()
    a, b = ModuleDataset(seed=3), ModuleDataset(seed=3)
    assert torch.equal(torch.random.get_rng_state(), before) and torch.equal(a.net.weight, b.net.weight)


class _NotANumpyRng(Dataset):
    def __init__(self):
        self.rng = "not a Generator"

    def __len__(self):
        return 2

    def __getitem__(self, i):
        return self.rng


def test_seed_worker_only_rebuilds_a_numpy_generator():
    assert [
        item for item in seeded_loader(_NotANumpyRng(), batch_size=None, num_workers=1, multiprocessing_context="fork")
    ] == ["not a Generator"] * 2


def _mark_worker(worker_id):
    get_worker_info().dataset.rng_after_init = float(get_worker_info().dataset.rng.random())


class _Marked(DrawDataset):
    def __getitem__(self, index):
        return {**super().__getitem__(index), "after_init": self.rng_after_init}


def test_seeded_loader_runs_a_user_worker_init_fn_after_seed_worker_and_refuses_a_generator():
    items = list(
        seeded_loader(
            _Marked(4),
            seed=1,
            batch_size=None,
            num_workers=2,
            multiprocessing_context="fork",
            worker_init_fn=_mark_worker,
        )
    )
    marks = {item["worker"]: item["after_init"] for item in items}
    assert len(set(marks.values())) == 2  # drawn after seed_worker rebuilt self.rng: different per worker
    with pytest.raises(TypeError, match="pass seed="):
        seeded_loader(DrawDataset(2), generator=torch.Generator())


def test_record_draws_refuses_batches_with_a_message_that_says_what_to_pass():
    with pytest.raises(ValueError, match="batch_size=None"):
        record_draws(DataLoader(DrawDataset(4), batch_size=2))


# importable datasets --------------------------------------------------------------------------


def test_module_dataset_pickles_with_its_module_and_reports_where_it_ran():
    ds = ModuleDataset(n=2)
    copy = pickle.loads(pickle.dumps(ds))
    item = copy[1]
    assert torch.equal(item["y"], ds[1]["y"]) and item["parent_mark"] is PARENT_MARK
    assert item["pid"] > 0 and "python" in item["cmdline"] and item["uss"] > 0
    assert b"torchcontracts.lessons.l05_data.data_pipeline" in pickle.dumps(ds)


def test_sharded_stream_calls_shard_in_each_worker_and_with_defaults_in_the_main_process():
    main = list(DataLoader(ShardedStream(5, lambda n, w, k: [w, k, n]), batch_size=None))
    assert main == [0, 1, 5]
    with worker_iter(_loader(ShardedStream(6, lambda n, w, k: range(w, n, k)))) as it:
        assert sorted(it) == list(range(6))


# throughput -----------------------------------------------------------------------------------


def _epoch(seconds=0.004):
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        pass
    return {"wait": seconds / 4, "step": 3 * seconds / 4}


def test_time_epochs_times_each_epoch_and_keeps_the_median_of_each_stage():
    res = time_epochs(_epoch, "busy loop", repeats=5)
    assert res.timing.runs == 5 and res.timing.median_s >= 0.004 and res.timing.device == "cpu"
    assert res.stages == pytest.approx({"wait": 0.001, "step": 0.003})
    assert res.noisy == res.timing.noisy and isinstance(res.timing.why, str)


def test_time_epochs_reports_a_loader_epoch_with_live_workers():
    loader = DataLoader(
        DrawDataset(8), batch_size=4, num_workers=2, persistent_workers=True, multiprocessing_context="fork"
    )
    res = time_epochs(lambda: sum(1 for _ in loader), "2 workers", repeats=4)
    close_workers(loader)
    assert res.timing.runs == 4 and res.stages == {} and res.timing.median_s > 0


def _times(noisy, median=0.05):
    return EpochTimes(
        Timing("t", median, 0.001, 5, "cpu", median, noisy, "busy" if noisy else ""), {"a": 0.01, "b": 0.04}
    )


def test_a_noisy_row_shows_the_word_and_why_never_a_figure():
    rows = [
        {"num_workers": 0, "times": _times(False), "samples": 100},
        {"num_workers": 2, "times": _times(True), "samples": 100},
    ]
    t = throughput_table(rows)
    assert t["samples/s"].tolist() == ["2,000", "noisy"] and t["why noisy"].tolist() == ["", "busy"]
    ax = plot_throughput(rows)
    assert len(ax.patches) == 1 and any(txt.get_text() == "noisy" for txt in ax.texts)


def test_plot_stages_draws_shares_and_writes_seconds_only_for_clean_loops():
    ax = plot_stages({"clean": _times(False), "busy": _times(True)})
    widths = sorted(round(p.get_width(), 3) for p in ax.patches)
    assert widths == [0.2, 0.2, 0.8, 0.8]
    labels = [txt.get_text() for txt in ax.texts]
    assert labels == ["10 ms", "40 ms"] and "1 noisy" in ax.get_title()

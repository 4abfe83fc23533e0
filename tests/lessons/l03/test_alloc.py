"""The allocator model: its constants come from the installed headers, its invariants hold on random
traces, and golden traces hand-derived from CUDACachingAllocator.cpp give the expected numbers."""

from __future__ import annotations

import dataclasses
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torchcontracts.lessons.l03_memory.alloc import (
    AllocatorModel,
    Config,
    Constants,
    KiB,
    MiB,
    ModelOOM,
    constants,
    header_constants,
)
from torchcontracts.lessons.l03_memory.alloc_viz import (
    fragmentation_trace,
    parse_size,
    parse_trace,
    replay,
    timeline_from_events,
)


# -- constants ---------------------------------------------------------------------------------
def test_model_constants_equal_the_installed_torch_headers():
    found = header_constants()
    if not found:
        pytest.skip("this torch ships no c10/core/AllocatorConfig.h; the model uses documented defaults")
    model = dataclasses.asdict(constants())
    for name, value in found.items():
        if name in model:
            assert model[name] == value, f"{name}: model {model[name]} != header {value}"
    assert {"kMinBlockSize", "kSmallSize", "kSmallBuffer", "kMinLargeAlloc", "kRoundLarge"} <= set(found)


def test_header_parser_reads_constexpr_and_large_segment_default(tmp_path):
    h = tmp_path / "AllocatorConfig.h"
    h.write_text("constexpr size_t kMinBlockSize = 1024;\nstd::atomic<size_t> large_segment_size_{4194304};\n")
    assert header_constants(str(h)) == {"kMinBlockSize": 1024, "kLargeBuffer": 4194304}


def test_documented_defaults_match_the_headers_of_torch_2_13():
    found = header_constants()
    if not found:
        pytest.skip("no headers to compare with")
    defaults = dataclasses.asdict(Constants())
    assert all(defaults[k] == v for k, v in found.items() if k in defaults)


# -- policy ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size, rounded", [(1, 512), (512, 512), (513, 1024), (1000, 1024), (MiB + 1, MiB + 512)])
def test_sizes_round_up_to_512_bytes(size, rounded):
    assert AllocatorModel().round_size(size) == rounded


@pytest.mark.parametrize(
    "size, segment",
    [
        (1, 2 * MiB),
        (MiB, 2 * MiB),
        (MiB + 1, 20 * MiB),
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),
        (11 * MiB, 12 * MiB),
        (33 * MiB + 1, 34 * MiB),
    ],
)
def test_segment_size_follows_the_pool_policy(size, segment):
    m = AllocatorModel()
    m.malloc("a", size)
    assert m.reserved == segment


def test_roundup_power2_divisions_rounds_to_quarter_powers():
    m = AllocatorModel(Config(roundup_power2_divisions=4))
    assert m.round_size(1258291) == MiB + 256 * KiB
    assert m.round_size(MiB) == MiB


def test_config_parses_alloc_conf_strings_and_refuses_unknown_keys():
    cfg = Config.parse("max_split_size_mb:64, roundup_power2_divisions:4")
    assert cfg.max_split_size == 64 * MiB and cfg.roundup_power2_divisions == 4
    with pytest.raises(ValueError, match="does not understand"):
        Config.parse("garbage_collection_threshold:0.6")
    with pytest.raises(NotImplementedError, match="expandable_segments"):
        AllocatorModel(Config.parse("expandable_segments:True"))


def test_parse_trace_reads_units_and_reports_bad_lines():
    assert parse_trace("alloc a 1.5MiB\nfree a # done\nempty_cache") == [
        ("alloc", "a", 1572864),
        ("free", "a"),
        ("empty_cache",),
    ]
    assert parse_size("300KiB") == 300 * 1024
    with pytest.raises(ValueError, match="trace line 1"):
        parse_trace("malloc a 3")


# -- golden traces (expected values derived by hand from the policy) ------------------------------
def _last(trace: str, config: Config | None = None):
    s = replay(trace, config)[-1]
    return s.allocated, s.reserved, s.segments


def test_golden_small_requests_share_a_2mib_segment():
    assert _last("alloc a 1000") == (1024, 2 * MiB, 1)
    assert _last("alloc a 1MiB\nalloc b 1MiB") == (2 * MiB, 2 * MiB, 1)
    assert _last("alloc a 1MiB\nalloc b 1MiB\nalloc c 1") == (2 * MiB + 512, 4 * MiB, 2)


def test_golden_medium_requests_are_carved_from_20mib_segments():
    assert _last("alloc a 5MiB\nalloc b 5MiB\nalloc c 5MiB\nalloc d 5MiB") == (20 * MiB, 20 * MiB, 1)
    assert _last("alloc a 5MiB\nalloc b 5MiB\nalloc c 5MiB\nalloc d 5MiB\nalloc e 5MiB") == (25 * MiB, 40 * MiB, 2)


def test_golden_large_block_is_not_split_when_remainder_is_at_most_1mib():
    # 19.5 MiB -> a 20 MiB segment; 0.5 MiB would remain, which is not > kSmallSize: no split
    assert _last("alloc a 19.5MiB") == (20 * MiB, 20 * MiB, 1)
    # reuse: 19 MiB leaves exactly 1 MiB, still not split, so the whole 20 MiB counts as allocated
    assert _last("alloc a 19.5MiB\nfree a\nalloc b 19MiB") == (20 * MiB, 20 * MiB, 1)
    # 18 MiB leaves 2 MiB > 1 MiB: split
    assert _last("alloc a 19.5MiB\nfree a\nalloc b 18MiB") == (18 * MiB, 20 * MiB, 1)


def test_golden_small_block_splits_down_to_512_bytes():
    m = AllocatorModel()
    m.malloc("a", 2 * MiB - 1024)  # > 1 MiB: the large pool, a 20 MiB segment, split
    assert [(s.small, s.size) for s in m.segments.values()] == [(False, 20 * MiB)]
    m2 = AllocatorModel()
    m2.malloc("a", MiB)
    m2.malloc("b", MiB - 512)
    assert [b.size for b in m2.segments[0].blocks] == [MiB, MiB - 512, 512]


def test_golden_empty_cache_releases_only_whole_free_segments():
    steps = replay("alloc a 5MiB\nalloc b 5MiB\nfree a\nempty_cache\nfree b\nempty_cache")
    assert [s.reserved for s in steps] == [20 * MiB] * 5 + [0]
    assert steps[3].allocated == 5 * MiB


def test_golden_fragmentation_experiment():
    steps = replay(fragmentation_trace(8, 6.0, "every other", 12.0))
    before, after_big, after_empty = steps[-3], steps[-2], steps[-1]
    assert (before.allocated, before.reserved, before.segments) == (24 * MiB, 60 * MiB, 3)
    assert before.inactive_split_bytes == 36 * MiB  # free, but none of it is a 12 MiB piece
    assert (after_big.allocated, after_big.reserved, after_big.segments) == (36 * MiB, 72 * MiB, 4)
    assert after_empty.reserved == 72 * MiB  # empty_cache cannot release split segments


def test_golden_best_fit_takes_the_smallest_hole_then_the_lowest_address():
    m = AllocatorModel()
    for i in range(8):
        m.malloc(f"t{i}", 6 * MiB)
    for i in (0, 2, 4, 6):
        m.free(f"t{i}")
    first = min(m.segments.values(), key=lambda s: s.addr)
    assert m.malloc("x", 6 * MiB).addr == first.addr  # a 6 MiB hole beats the 8 MiB ones
    # next: an 8 MiB hole; 1 MiB would remain, which is not > kSmallSize, so the whole 8 MiB is used
    assert m.malloc("y", 7 * MiB).size == 8 * MiB
    assert m.malloc("z", 5 * MiB).size == 6 * MiB  # a 6 MiB hole again, used whole (1 MiB remainder)
    assert m.malloc("w", 4 * MiB).size == 4 * MiB  # the last 6 MiB hole: 2 MiB remain, split


def test_golden_max_split_size_keeps_oversize_blocks_whole():
    cfg = Config(max_split_size=20 * MiB)
    # a 4 MiB request may not take the cached 30 MiB block (>= max_split): a new 20 MiB segment
    assert _last("alloc a 30MiB\nfree a\nalloc b 4MiB", cfg) == (4 * MiB, 50 * MiB, 2)
    # a 30 MiB request may (it is not >= 20 MiB smaller than the block)
    assert _last("alloc a 30MiB\nfree a\nalloc b 4MiB\nalloc c 30MiB", cfg) == (34 * MiB, 50 * MiB, 2)
    # without the option the 30 MiB block is split for the 4 MiB request
    assert _last("alloc a 30MiB\nfree a\nalloc b 4MiB") == (4 * MiB, 30 * MiB, 1)


def test_max_split_size_below_20_mib_is_refused_as_cuda_refuses_it():
    with pytest.raises(ValueError, match="must be >= 20"):
        Config(max_split_size=8 * MiB)
    with pytest.raises(ValueError, match="must be >= 20"):
        Config.parse("max_split_size_mb:8")
    assert Config.parse("max_split_size_mb:20").max_split_size == 20 * MiB


def test_oom_frees_whole_cached_segments_then_retries():
    m = AllocatorModel(Config(capacity=40 * MiB))
    m.malloc("a", 12 * MiB)
    m.free("a")
    m.malloc("b", 30 * MiB)
    assert m.reserved == 30 * MiB and m.counters["num_alloc_retries"] == 1


def test_oom_message_reports_reserved_but_unallocated_memory():
    m = AllocatorModel(Config(capacity=64 * MiB))
    for op in parse_trace(fragmentation_trace(8, 6.0, "every other", 12.0))[:-2]:
        m.malloc(op[1], op[2]) if op[0] == "alloc" else m.free(op[1])
    with pytest.raises(
        ModelOOM, match=r"Tried to allocate 12.00 MiB.*36.00 MiB is reserved by PyTorch but unallocated"
    ):
        m.malloc("big", 12 * MiB)


def test_snapshot_timeline_ends_where_the_model_is():
    m = AllocatorModel()
    for op in parse_trace(fragmentation_trace()):
        getattr(m, {"alloc": "malloc", "free": "free", "empty_cache": "empty_cache"}[op[0]])(*op[1:])
    lives, reserveds = timeline_from_events(m.snapshot()["device_traces"][0])
    assert reserveds[-1] == m.reserved
    assert lives[-1] == m.memory_stats()["requested_bytes.all.current"]


# -- properties ----------------------------------------------------------------------------------
sizes = st.one_of(st.integers(1, MiB), st.integers(MiB + 1, 10 * MiB), st.integers(10 * MiB, 48 * MiB))
ops = st.lists(
    st.tuples(st.sampled_from(["alloc", "alloc", "free", "empty_cache"]), sizes, st.integers(0, 10**6)),
    min_size=1,
    max_size=40,
)
configs = st.sampled_from([Config(), Config(max_split_size=20 * MiB), Config(roundup_power2_divisions=4)])


def _run(model: AllocatorModel, trace) -> None:
    n = 0
    for kind, size, pick in trace:
        live = sorted(model.live)
        if kind == "alloc":
            model.malloc(f"t{n}", size)
            n += 1
        elif kind == "free" and live:
            model.free(live[pick % len(live)])
        elif kind == "empty_cache":
            model.empty_cache()
        _check(model)


def _check(m: AllocatorModel) -> None:
    m.check_invariants()
    stats = m.memory_stats()
    assert stats["allocated_bytes.all.current"] <= stats["reserved_bytes.all.current"]
    ranges = sorted((s.addr, s.addr + s.size) for s in m.segments.values())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(ranges, ranges[1:])), "segments overlap"
    c = m.c
    for s in m.segments.values():
        if s.small:
            assert s.size == c.kSmallBuffer
        else:
            assert s.size == c.kLargeBuffer or (s.size >= c.kMinLargeAlloc and s.size % c.kRoundLarge == 0)
    for b in m.live.values():
        assert b.size >= m.round_size(b.requested) and b.size % c.kMinBlockSize == 0
    free = sum(b.size for s in m.segments.values() for b in s.blocks if not b.allocated)
    assert free + m.allocated == m.reserved, "split/merge must conserve bytes"
    assert stats["requested_bytes.all.current"] == sum(b.requested for b in m.live.values())
    assert stats["reserved_bytes.small_pool.current"] + stats["reserved_bytes.large_pool.current"] == m.reserved


@settings(max_examples=200, deadline=None)
@given(trace=ops, config=configs)
def test_invariants_hold_on_random_traces(trace, config):
    _run(AllocatorModel(config), trace)


@settings(max_examples=100, deadline=None)
@given(trace=ops, config=configs)
def test_freeing_everything_then_empty_cache_returns_all_memory(trace, config):
    m = AllocatorModel(config)
    _run(m, trace)
    for name in list(m.live):
        m.free(name)
        _check(m)
    assert all(len(s.blocks) == 1 for s in m.segments.values()), "free neighbours must merge back to whole segments"
    m.empty_cache()
    assert m.reserved == 0 and m.allocated == 0


@settings(max_examples=100, deadline=None)
@given(trace=ops)
def test_reserved_never_shrinks_without_empty_cache(trace):
    m = AllocatorModel()
    last = 0
    for kind, size, pick in trace:
        if kind == "empty_cache":
            continue
        live = sorted(m.live)
        if kind == "alloc":
            m.malloc(f"t{len(m.events)}", size)
        elif live:
            m.free(live[pick % len(live)])
        assert m.reserved >= last
        last = m.reserved


@pytest.mark.skipif(not os.environ.get("TORCHCONTRACTS_CUDA_ALLOC_TEST"), reason="needs a CUDA GPU; see lesson 03")
def test_model_matches_the_real_allocator_on_cuda():  # pragma: no cover - GPU only
    from torchcontracts.lessons.l03_memory.alloc_viz import replay_cuda

    trace = fragmentation_trace()
    assert [(s.allocated, s.reserved) for s in replay(trace)] == replay_cuda(trace)


def test_memory_stats_report_peaks_and_counters_like_cuda():
    m = AllocatorModel()
    m.malloc("a", 30 * MiB)
    m.free("a")
    m.empty_cache()
    st = m.memory_stats()
    assert st["reserved_bytes.all.current"] == 0 and st["reserved_bytes.all.peak"] == 30 * MiB
    assert st["allocated_bytes.all.peak"] == 30 * MiB and st["num_device_alloc"] == st["num_device_free"] == 1


# -- pictures ------------------------------------------------------------------------------------
def test_draw_segments_draws_one_bar_per_block(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from torchcontracts.lessons.l03_memory.alloc_viz import draw_segments, draw_steps, draw_timeline

    steps = replay(fragmentation_trace())
    snap = steps[-2].snapshot
    ax = draw_segments(snap)
    assert len(ax.patches) == sum(len(s["blocks"]) for s in snap["segments"])
    widths = sorted(round(p.get_width(), 6) for p in ax.patches)
    assert widths == sorted(round(b["size"] / MiB, 6) for s in snap["segments"] for b in s["blocks"])
    draw_steps(steps)
    draw_timeline(steps[-1].snapshot)
    plt.close("all")


def test_explorer_renders_and_rerenders_when_a_control_changes(monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from torchcontracts.lessons.l03_memory.alloc_viz import explorer

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj: shown.append(obj))
    box = explorer()
    first = capsys.readouterr().out
    box.children[0].children[0].value = 7.0  # tensor MiB
    second = capsys.readouterr().out
    box.children[1].children[0].value = "first half"  # order of frees
    third = capsys.readouterr().out
    assert shown == [box]
    assert "reserved 72.00 MiB" in first  # the lesson's experiment, as in the golden trace
    assert "reserved" in second and second != first and third != second
    plt.close("all")

"""Lesson 03's proof predicates fail on the behaviour the seed describes and pass on PyTorch's.

Each predicate is loaded from the notebook itself (``notebook_functions``), so the test checks the
very proof the lesson asserts. The "torch" side is what the lesson measures (the allocator model on a
CPU, whose policy tests/test_alloc.py checks against the C++ source); the "seed" side is an allocator or
a measurement that behaves the way the seed says: a buddy system, slabs, an immediate cudaFree, an
``empty_cache`` that reclaims pieces of live segments, checkpointing that saves everything.
"""

from __future__ import annotations

import pytest

from torchcontracts.lessons.l03_memory.alloc import KiB, MiB, header_constants
from torchcontracts.lessons.l03_memory.alloc_viz import fragmentation_trace, report_model

from conftest import ROOT, notebook_functions

NB = ROOT / "notebooks" / "03_memory_contracts.ipynb"
F = notebook_functions(
    NB,
    "proof_c146",
    "proof_c085b",
    "proof_c020",
    "proof_c085",
    "proof_c080",
    "proof_c018",
    "proof_c086",
    "proof_c024",
    "proof_c019",
    "src_round",
    "src_segment",
)


def _pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def _blocks(trace: str) -> dict:
    segs = report_model(trace)["steps"][-1]["segments"]
    return {
        kind: [b["size"] for s in segs if s["segment_type"] == kind for b in s["blocks"]] for kind in ("large", "small")
    }


# C146: checkpointing trades memory for recompute -----------------------------------------------

TORCH_C146 = {"saved": (15 * 262144, 2 * 262144), "rerun": (0, 8), "same_grads": True}


def test_c146_holds_on_what_the_lesson_measures():
    assert F["proof_c146"](TORCH_C146)


@pytest.mark.parametrize(
    "seed_side",
    [
        {"saved": (15 * 262144, 15 * 262144)},  # checkpointing saved nothing
        {"rerun": (0, 0)},  # nothing was recomputed (so nothing could have been dropped)
        {"same_grads": False},  # recompute changed the gradients
    ],
)
def test_c146_fails_when_checkpointing_does_not_trade_memory_for_compute(seed_side):
    assert not F["proof_c146"]({**TORCH_C146, **seed_side})


# C085b: the size constants come from the C++ source; no power-of-two classes by default ---------


def _segment_for(found: dict, round_to=None) -> dict:
    r = round_to or (lambda n: F["src_round"](n, found))
    return {n: F["src_segment"](r(n), found) for n in (3 * MiB, 21 * MiB, 33 * MiB + 1)}


def test_c085b_holds_on_the_installed_header():
    found = header_constants()
    assert F["proof_c085b"]({"header": found, "segment_for": _segment_for(found)})


def test_c085b_fails_with_power_of_two_size_classes():
    found = header_constants()
    buddy = {n: _pow2(n) for n in (3 * MiB, 21 * MiB, 33 * MiB + 1)}  # 4, 32, 64 MiB
    assert not F["proof_c085b"]({"header": found, "segment_for": buddy})


def test_c085b_fails_when_the_header_differs_from_the_source():
    found = {**header_constants(), "kLargeBuffer": 16 * MiB}
    assert not F["proof_c085b"]({"header": found, "segment_for": _segment_for(header_constants())})


# C020: best fit with splitting, not a buddy system ---------------------------------------------


def test_c020_holds_on_the_model():
    assert F["proof_c020"](_blocks("alloc a 3MiB\nalloc b 300KiB"))


def test_c020_fails_on_a_buddy_allocator():
    # a buddy system rounds 3 MiB to a 4 MiB block (halving 32 -> 16 -> 8 -> 4) and 300 KiB to 512 KiB
    buddy = {"large": [4 * MiB, 4 * MiB, 8 * MiB, 16 * MiB], "small": [512 * KiB, 512 * KiB, MiB]}
    assert not F["proof_c020"](buddy)


# C085: not slabs of one size, not power-of-two splits -----------------------------------------


def _c085_observed(trace: str) -> dict:
    segs = report_model(trace)["steps"][-1]["segments"]
    return {
        "small": [
            [b["size"] for b in s["blocks"] if b["state"] == "active_allocated"]
            for s in segs
            if s["segment_type"] == "small"
        ],
        "large": [[b["size"] for b in s["blocks"]] for s in segs if s["segment_type"] == "large"],
    }


def test_c085_holds_on_the_model():
    assert F["proof_c085"](_c085_observed("alloc a 1000\nalloc b 5000\nalloc c 100000\nalloc d 3MiB\nalloc e 5MiB"))


def test_c085_fails_on_a_slab_allocator():
    slabs = {
        "small": [[1024, 1024], [8192], [131072]],  # one size class per slab
        "large": [[4 * MiB, 8 * MiB, 4 * MiB, 4 * MiB]],
    }  # and power-of-two splits
    assert not F["proof_c085"](slabs)


# C080: del returns the block to the cache, not to the device -----------------------------------


def test_c080_holds_on_the_model():
    assert F["proof_c080"](report_model("alloc x 5MiB\nfree x\nempty_cache")["steps"])


def test_c080_fails_if_del_called_cudafree_at_once():
    alloc = {"allocated": 5 * MiB, "reserved": 20 * MiB}
    freed = {"allocated": 0, "reserved": 0}  # the seed: the destructor calls cudaFree
    assert not F["proof_c080"]([alloc, freed, {"allocated": 0, "reserved": 0}])


# C018: allocated counts blocks; reserved shrinks only on empty_cache or an OOM retry -------------

TORCH_C018 = {
    "requested": 19 * MiB + 512 * KiB,
    "charged": 20 * MiB,
    "reserved_before_free": 22 * MiB,
    "reserved_after_free": 22 * MiB,
    "cached_before_retry": 20 * MiB,
    "after_retry": 20 * MiB,
    "retries": 1,
    "new_segment": 20 * MiB,
}


def test_c018_holds_on_the_model():
    stats = report_model("alloc a 19.5MiB\nalloc b 300KiB\nfree a\nalloc c 4MiB\nempty_cache")["steps"]
    retry = report_model("alloc a 12MiB\nfree a\nalloc b 20MiB", capacity=24 * MiB)["steps"]
    first, kept, freed = stats[:3]
    observed = {
        "requested": first["requested_bytes.all.current"],
        "charged": first["allocated_bytes.all.current"],
        "reserved_before_free": kept["reserved"],
        "reserved_after_free": freed["reserved"],
        "cached_before_retry": retry[1]["reserved"],
        "after_retry": retry[2]["reserved"],
        "retries": retry[2]["num_alloc_retries"],
        "new_segment": 20 * MiB,
    }
    assert F["proof_c018"](observed)


@pytest.mark.parametrize(
    "seed_side",
    [
        {"charged": 19 * MiB + 512 * KiB},  # allocated = tensor bytes
        {"reserved_after_free": 2 * MiB},  # free gave memory back
        {"retries": 0, "after_retry": 40 * MiB},  # reserved never shrinks by itself
    ],
)
def test_c018_fails_on_the_seed_picture(seed_side):
    assert not F["proof_c018"]({**TORCH_C018, **seed_side})


# C086: empty_cache releases whole free segments only -------------------------------------------

TORCH_C086 = {"inactive_split": 18 * MiB, "reserved_before": 72 * MiB, "reserved_after": 72 * MiB, "reserved_final": 0}


def test_c086_holds_on_the_model_running_the_lessons_trace():
    frag = fragmentation_trace(8, 6.0, "every other", 12.0)
    trace = frag + "\n" + "\n".join(f"free {t}" for t in ("t1", "t3", "t5", "t7", "big")) + "\nempty_cache"
    rows = report_model(trace)["steps"]
    i_big = next(i for i, line in enumerate(trace.splitlines()) if line.startswith("alloc big"))
    observed = {
        "inactive_split": rows[i_big]["inactive_split_bytes.all.current"],
        "reserved_before": rows[i_big]["reserved"],
        "reserved_after": rows[i_big + 1]["reserved"],
        "reserved_final": rows[-1]["reserved"],
    }
    assert F["proof_c086"](observed)


@pytest.mark.parametrize(
    "seed_side",
    [
        {"reserved_after": 54 * MiB},  # empty_cache reclaimed free pieces of live segments
        {"reserved_final": 72 * MiB},  # ... or kept wholly free segments
    ],
)
def test_c086_fails_if_empty_cache_behaved_otherwise(seed_side):
    assert not F["proof_c086"]({**TORCH_C086, **seed_side})


# C024 / C019: the CUDA branches' predicates (they run on a GPU; here they are fed both sides) ----


def test_c024_needs_a_reading_during_the_kernel_that_equals_the_one_after():
    honest = {"still_running": True, "during": 256 * MiB, "after": 256 * MiB, "output_bytes": 256 * MiB}
    assert F["proof_c024"](honest)
    assert not F["proof_c024"]({**honest, "during": 0})  # the seed: the counter lags until synchronize
    assert not F["proof_c024"]({**honest, "still_running": False})  # finished already: the reading shows nothing


def test_c019_needs_pinned_batches_that_grow_host_memory_not_reserved():
    honest = {"all_pinned": True, "reserved_growth": 0, "host_growth": 2 * MiB, "batch_bytes": MiB}
    assert F["proof_c019"](honest)
    assert not F["proof_c019"]({**honest, "reserved_growth": 16 * MiB})  # the seed: pinned memory is reserved
    assert not F["proof_c019"]({**honest, "all_pinned": False})  # nothing was pinned at all

"""Torch Contracts: helpers for a course that proves PyTorch's contracts on live kernels.

Modules, one concern each:
  device   - device detection and the doctor
  claims   - state a seed claim, assert the measured verdict, record it for the ledger
  skips    - the manifest of cells that need CUDA, with reasons and CPU paths
  check    - instant-feedback checks shared by lab notebooks and the grader
  timing   - torch.utils.benchmark with median and spread
  viz      - stride drawings and the stride explorer widget (lesson 01)
  graph    - draw a live backward graph with matplotlib only (lesson 02)
  alloc    - a model of the CUDA caching allocator; alloc_viz draws it (lesson 03)
  memory   - saved-activation meter and other CPU memory measurements (lesson 03)
  roofline - measure this machine's bandwidth and FLOP/s ceilings, place kernels on them (lesson 04)
  workloads - workloads of known cost for judging benchmarks (lab 04)
  data_pipeline - importable datasets, worker meters and the seeding recipe (lesson 05, lab 05)
  throughput - loader throughput by epoch, judged for contention, with its plots (lesson 05)
  training - checkpoint round trips, RNG scrambling and fresh-process runs (lesson 06, lab 05)
  compile_tools - count graphs, breaks and recompiles; read guards and generated code (lesson 07)
  deploy   - quiet exports, fresh-process snippets, what a pickle refers to (lesson 08)
  dist_tools - torchrun launches with free ports, per-rank logs, nothing left behind (lesson 09)
  rank_runner - forked gloo groups whose ranks fail in one line (lesson 09, lab 07)
  record   - `torchcontracts record` on a GPU, and recorded figures shown beside a CPU's (lesson 10)
  gpu_checks - the registry of GPU comparisons that `record` runs
  site, site_render - `torchcontracts site`: the course as static HTML
  exercises - the lessons' ungraded "Try it" checkers
  labchecks - each lab's tasks and public checks (hidden checks live in solutions/)
  labbuild - generate labs/ from solutions/
  grade*   - the grader: rebuild, run in a sandboxed kernel, judge outside it
  ledger   - run the lessons headless and collect verdicts
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these load on first use
    from .claims import claim, verdict
    from .device import best_device, diagnose
    from .skips import cuda_or_skip

__version__ = "0.1.0"
__all__ = ["__version__", "best_device", "claim", "cuda_or_skip", "diagnose", "verdict"]

# Lazy exports (PEP 562): `import torchcontracts` stays cheap, so the CLI can start the grader's
# kernel server before this process pays for `import torch`.
_EXPORTS = {"claim": "claims", "verdict": "claims", "best_device": "device", "diagnose": "device",
            "cuda_or_skip": "skips"}


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'torchcontracts' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_EXPORTS))

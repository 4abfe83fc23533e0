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
  labchecks - each lab's tasks and public checks (hidden checks live in solutions/)
  labbuild - generate labs/ from solutions/
  grade*   - the grader: rebuild, run in a sandboxed kernel, judge outside it
  ledger   - run the lessons headless and collect verdicts
"""

from __future__ import annotations

from .claims import claim, verdict
from .device import best_device, diagnose
from .skips import cuda_or_skip

__version__ = "0.1.0"
__all__ = ["__version__", "best_device", "claim", "cuda_or_skip", "diagnose", "verdict"]

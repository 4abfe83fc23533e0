"""Torch Contracts: helpers for a course that proves PyTorch's contracts on live kernels.

The package mirrors the course (``torchcontracts.course`` is the manifest of lessons):
  course    - the manifest: one row per lesson (notebook, package folder, labs, what needs CUDA)
  core/     - what every lesson imports: claims and verdicts, skips, device and the doctor, timing, nbio
  checks/   - lab and Try-it checks (Case, Check, Task, LabSpec, compare) and the Try-it runner
  labs/     - the lab source format, the builder of labs/ from solutions/, load(lab_id)
  lessons/  - one folder per lesson (lNN_slug): its helpers, tryit.py, its labs' checks (labNN_*.py)
  grading/  - the grader: rebuild, run in a sandboxed kernel, judge outside it
  publish/  - ledger, site, record and the GPU comparisons
  cli       - the ``torchcontracts`` command
Old module paths (``torchcontracts.check``, ``torchcontracts.labchecks.*``...) import through shims until course release 0.6.0.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time these load on first use
    from torchcontracts.core.claims import claim, verdict
    from torchcontracts.core.device import best_device, diagnose
    from torchcontracts.core.skips import cuda_or_skip

__version__ = "0.1.0"
__all__ = ["__version__", "best_device", "claim", "cuda_or_skip", "diagnose", "verdict"]

# Lazy exports (PEP 562): `import torchcontracts` stays cheap, so the CLI can start the grader's
# kernel server before this process pays for `import torch`.
_EXPORTS = {
    "claim": "core.claims",
    "verdict": "core.claims",
    "best_device": "core.device",
    "diagnose": "core.device",
    "cuda_or_skip": "core.skips",
}

_SUBPACKAGES = ("course", "core", "checks", "labs", "lessons", "grading", "publish")

from torchcontracts import _moved  # noqa: E402 - the old module paths, until course release 0.6.0

_moved.install()


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name in _SUBPACKAGES:  # `tc.core.claims.recorded()` works without an import of its own
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'torchcontracts' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_SUBPACKAGES})

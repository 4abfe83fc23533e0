"""Lab 07's model and sizes (kernel side): what the ranks build and the setup cell imports. The judges and their
references are in ``lab07_judges`` and ``lab07_accum_judges``, which a graded kernel cannot see.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

__all__ = ["IN", "OUT", "make_model"]

IN, OUT = 6, 2


def make_model(weights: Sequence[torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """The lab's model: Linear(6, 16) -> Tanh -> Linear(16, 2), with ``weights`` when given."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(IN, 16), nn.Tanh(), nn.Linear(16, OUT))
    if weights is not None:
        with torch.no_grad():
            for p, w in zip(model.parameters(), weights):
                p.copy_(w)
    return model

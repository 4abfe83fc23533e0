"""Lab 02's pieces that both halves use: the drivers in ``lab02_autograd`` (in the learner's kernel) and the
judges in ``lab02_judges`` (grader-only: a graded kernel sees placeholders there, see ``grading.hidden``).

None of them computes an answer: ``NO_GRAD`` is a driver's word, ``_fresh`` makes leaves, ``build_mlp``
builds the model a monitor is attached to.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["NO_GRAD", "build_mlp"]

NO_GRAD = "no gradient"  # what a driver returns for a float input whose .grad stayed None


def _fresh(a: Any) -> Any:
    """A floating tensor becomes a fresh leaf that requires grad; anything else passes as is."""
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return a.detach().clone().requires_grad_(True)
    return a


def build_mlp(weights: Sequence[torch.Tensor]) -> torch.nn.Sequential:
    """Linear layers with these (weight, bias) pairs and Tanh between them: ``0.weight``, ``0.bias``, ``2.weight`` ..."""
    layers: list[torch.nn.Module] = []
    for i in range(0, len(weights), 2):
        w, b = weights[i], weights[i + 1]
        lin = torch.nn.Linear(w.shape[1], w.shape[0], dtype=w.dtype)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        layers += [lin, torch.nn.Tanh()]
    return torch.nn.Sequential(*layers[:-1])

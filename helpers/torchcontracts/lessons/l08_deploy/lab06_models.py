"""Lab 06's models and cases: the networks the tasks hand out, and the inputs the judges draw.

Both sides use them: the call drivers (in the learner's kernel) rebuild a case's model from its weights, and
the judges (in the grader) build the reference model the artefact must match. A case carries the model's
weights, the export example and the batch sizes to judge at, never the judging inputs themselves: the judge
draws those (``judging_inputs``) from a hash of the artefact's own bytes, so they exist only once the file
does, and a file cannot special-case them (it would have to hold values derived from its own hash). The same
file is judged on the same inputs every time. The public names stay importable from ``lab06_deployment``,
which the lab notebook imports.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import nn

from torchcontracts.checks import Case

__all__ = [
    "ATOL",
    "MAX_REL_ERROR",
    "MIN_AGREEMENT",
    "MIN_SHRINK",
    "MLP_WIDTHS",
    "THRESHOLD",
    "FragileNet",
    "SmallClassifier",
    "Upsampler",
    "branch_inputs",
    "classifier_case",
    "fragile_case",
    "judging_generator",
    "judging_inputs",
    "make_classifier",
    "make_fragile",
    "make_mlp",
    "make_upsampler",
    "mlp_case",
    "state_of",
    "upsampler_case",
]

THRESHOLD = 0.5
ATOL = 1e-5  # the parity the tasks ask for (eager vs the artefact, on the grader's inputs)
MLP_WIDTHS = (64, 256, 256, 10)
MIN_SHRINK, MIN_AGREEMENT, MAX_REL_ERROR = 2.0, 0.97, 0.03


class FragileNet(nn.Module):
    """t1's model as handed out: a data-dependent Python branch, and a plain tensor attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)
        self.offset = torch.linspace(-1.0, 1.0, 8)  # a plain attribute: not in state_dict(), not moved by .to()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if h.mean() > 0.5:  # a branch on a tensor's value
            h = h * 0.5
        return self.fc2(h) + self.offset


class SmallClassifier(nn.Module):
    """t2's model: conv, batch norm, dropout; it comes in training mode, as a freshly built module does."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (B, 3, 12, 12) -> (B, 4)
        h = torch.relu(self.bn(self.conv(x))).mean(dim=(2, 3))
        return self.fc(self.drop(h))


class Upsampler(nn.Module):
    """t3's model: a bicubic upsampling between two convolutions, and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (B, 3, 8, 8) -> (B, 2, 16, 16), (B, 2)
        h = F.interpolate(torch.relu(self.conv1(x)), scale_factor=2, mode="bicubic", align_corners=False)
        heat = self.conv2(h)
        return heat, heat.amax(dim=(2, 3))


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A model's state as a plain dict of tensors (what a case carries)."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _built(cls: type[nn.Module], state: dict[str, torch.Tensor] | None, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    model = cls()
    if state is not None:
        extra = {k: v for k, v in state.items() if k not in model.state_dict()}
        model.load_state_dict({k: v for k, v in state.items() if k not in extra})
        for name, value in extra.items():  # FragileNet.offset lives outside the state_dict
            setattr(model, name, value.clone())
    return model


def make_fragile(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> FragileNet:
    """t1's FragileNet, with ``state`` (weights and ``offset``) if given."""
    return _built(FragileNet, state, seed)  # type: ignore[return-value]


def make_classifier(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> SmallClassifier:
    """t2's SmallClassifier in training mode, with trained-looking batch-norm statistics."""
    model = _built(SmallClassifier, state, seed)
    if state is None:
        g = torch.Generator().manual_seed(seed + 1)
        model.bn.running_mean.copy_(torch.randn(8, generator=g) * 0.2)
        model.bn.running_var.copy_(torch.rand(8, generator=g) * 1.5 + 0.5)
    return model.train()  # type: ignore[return-value]


def make_upsampler(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> Upsampler:
    """t3's Upsampler, in eval mode."""
    return _built(Upsampler, state, seed).eval()  # type: ignore[return-value]


def make_mlp(state: dict[str, torch.Tensor] | None = None, seed: int = 0) -> nn.Sequential:
    """t4's MLP: Linear + ReLU with widths ``MLP_WIDTHS``, in eval mode."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for a, b in zip(MLP_WIDTHS, MLP_WIDTHS[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    model = nn.Sequential(*layers[:-1]).eval()
    if state is not None:
        model.load_state_dict(state)
    return model


def branch_inputs(model: FragileNet, g: torch.Generator, batch: int = 8) -> list[torch.Tensor]:
    """Two batches, one on each side of ``h.mean() > 0.5``: found by scaling one random batch."""
    x = torch.randn(batch, 16, generator=g)
    with torch.no_grad():
        means = {s: float(torch.relu(model.fc1(x * s)).mean()) for s in (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16)}
    calm = max((s for s, m in means.items() if m < THRESHOLD - 0.05), default=0.05)
    hot = min((s for s, m in means.items() if m > THRESHOLD + 0.05), default=16)
    return [x * calm, x * hot]


def fragile_case(label: str, seed: int, batch: int = 8) -> Case:
    """t1: FragileNet's weights (with its ``offset``), an export example, and the batch size to judge at."""
    model = make_fragile(seed=seed)
    g = torch.Generator().manual_seed(seed + 11)
    return Case(
        label, ({**state_of(model), "offset": model.offset.clone()}, torch.randn(batch, 16, generator=g), batch)
    )


def classifier_case(label: str, seed: int, batches: tuple[int, ...]) -> Case:
    """t2: the classifier's weights, an export example of batch 4, and the batch sizes to judge at."""
    g = torch.Generator().manual_seed(seed + 21)
    return Case(label, (state_of(make_classifier(seed=seed)), torch.randn(4, 3, 12, 12, generator=g), tuple(batches)))


def upsampler_case(label: str, seed: int, batches: tuple[int, ...]) -> Case:
    """t3: the upsampler's weights, an export example of batch 4, and the batch sizes to judge at."""
    g = torch.Generator().manual_seed(seed + 31)
    return Case(label, (state_of(make_upsampler(seed=seed)), torch.randn(4, 3, 8, 8, generator=g), tuple(batches)))


def mlp_case(label: str, seed: int, n: int = 512) -> Case:
    """t4: the MLP's weights and how many inputs to judge its accuracy on."""
    return Case(label, (state_of(make_mlp(seed=seed)), n))


def judging_generator(blob: bytes, label: str) -> torch.Generator:
    """A generator seeded by a hash of the artefact's bytes (and the case's label): the judge's inputs are
    fixed by the file, drawn after it exists, and unknown to the kernel that made it."""
    digest = hashlib.sha256(label.encode() + b"\0" + bytes(blob)).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def judging_inputs(task: str, case: Case, blob: bytes) -> list[torch.Tensor]:
    """The inputs a judge runs an artefact on: drawn here, in the grader, from the artefact's own bytes.

    t1: two batches on either side of FragileNet's branch; t2 and t3: one batch per batch size; t4: one
    batch of ``n`` inputs."""
    g = judging_generator(blob, f"{task}:{case.label}")
    if task == "t1":
        state, _example, batch = case.args
        return branch_inputs(make_fragile(state), g, int(batch))
    if task == "t2":
        return [torch.randn(b, 3, 12, 12, generator=g) for b in case.args[2]]
    if task == "t3":
        return [torch.randn(b, 3, 8, 8, generator=g) for b in case.args[2]]
    if task == "t4":
        return [torch.randn(int(case.args[1]), MLP_WIDTHS[0], generator=g)]
    raise ValueError(f"no judging inputs for task {task!r}")

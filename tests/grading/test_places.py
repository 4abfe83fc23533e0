"""Which kernels get a sandbox of their own (grading.steps.needs_own_sandbox): without root, kernels of one fork
server would share a uid, /tmp, /dev/shm, IPC and network, so every bwrap kernel gets its own sandbox there; as
root they share the fork server and each gets its own place (grading.places, tested in test_grade_sandbox.py)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from torchcontracts.grading import steps
from torchcontracts.grading.steps import KernelJob, needs_own_sandbox


@dataclasses.dataclass
class _Opts:
    sandbox: str


def _job(sandbox: str, fresh: bool = False) -> KernelJob:
    return KernelJob(
        lab="lab01_strides",
        steps=[],
        tasks=[],
        missing=frozenset(),
        members=[],
        cases={},
        opts=_Opts(sandbox),  # type: ignore[arg-type]
        scratch=Path("/nonexistent"),
        name="k",
        deadline=0.0,
        fresh_sandbox=fresh,
    )


@pytest.mark.parametrize(
    "euid, sandbox, fresh, own",
    [
        (0, "bwrap", False, False),  # root: one fork server, a uid and a place per kernel
        (0, "bwrap", True, True),  # a fresh-process phase (lab 05 t4's resume)
        (1000, "bwrap", False, True),  # no root: a sandbox per kernel
        (1000, "none", False, False),  # none mode: no sandbox to have (README)
        (0, "none", True, True),
    ],
)
def test_a_kernel_gets_a_sandbox_of_its_own_exactly_when_it_could_not_have_a_place_of_its_own(
    monkeypatch, euid, sandbox, fresh, own
):
    monkeypatch.setattr(steps.os, "geteuid", lambda: euid)
    assert needs_own_sandbox(_job(sandbox, fresh)) is own

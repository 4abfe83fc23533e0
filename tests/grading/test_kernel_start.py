"""A kernel that dies before any learner code ran gets one more start (grading.steps._start), and the reason a kernel
could not start carries the last line it wrote (grading.kernel._last_line): a namespace or limit that failed under a
loaded machine says which."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from torchcontracts.grading import steps
from torchcontracts.grading.kernel import _last_line
from torchcontracts.grading.steps import KernelJob, KernelLog


@dataclasses.dataclass
class _Opts:
    sandbox: str = "none"
    course: Path = Path("/nonexistent")
    mem_mb: int = 1024
    threads: int = 1
    fork_server: bool = True


def _job(tmp_path: Path) -> KernelJob:
    return KernelJob("lab01_strides", [], [], frozenset(), [], {}, _Opts(), tmp_path, "k", 0.0)  # type: ignore[arg-type]


def _fake(reasons: list[str], made: list[Path]):
    class FakeKernel:
        def __init__(self, workdir: Path, **_kw):
            made.append(workdir)
            self.dead_reason = reasons.pop(0)
            self.closed = False

        def shutdown(self) -> None:
            self.closed = True

    return FakeKernel


def test_a_kernel_that_died_while_starting_gets_one_more_start(tmp_path, monkeypatch):
    made: list[Path] = []
    monkeypatch.setattr(
        steps, "GradingKernel", _fake(["the kernel exited with code 70 while starting: OSError", ""], made)
    )
    kernel, _uid = steps._start(_job(tmp_path), KernelLog(), ["t1"])
    assert kernel.dead_reason == "" and [p.name for p in made] == ["k-k", "k-k-1"]


def test_a_second_failure_is_reported_not_retried_again(tmp_path, monkeypatch):
    made: list[Path] = []
    reasons = ["the kernel exited with code 70 while starting", "the kernel exited with code 70 while starting: X"]
    monkeypatch.setattr(steps, "GradingKernel", _fake(reasons, made))
    kernel, _uid = steps._start(_job(tmp_path), KernelLog(), ["t1"])
    assert kernel.dead_reason.endswith(": X") and len(made) == 2


def test_a_kernel_that_started_is_not_restarted(tmp_path, monkeypatch):
    made: list[Path] = []
    monkeypatch.setattr(steps, "GradingKernel", _fake(["", ""], made))
    steps._start(_job(tmp_path), KernelLog(), ["t1"])
    assert len(made) == 1


def test_the_reason_carries_the_logs_last_line(tmp_path):
    log = tmp_path / "k.log"
    log.write_text("Traceback (most recent call last):\n  File ...\nOSError: [Errno 22] unshare: Invalid argument\n\n")
    assert _last_line(str(log)) == ": OSError: [Errno 22] unshare: Invalid argument"
    assert _last_line(str(tmp_path / "missing.log")) == ""
    (tmp_path / "empty.log").write_text("")
    assert _last_line(str(tmp_path / "empty.log")) == ""

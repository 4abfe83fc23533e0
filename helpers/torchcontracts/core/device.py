"""Device detection and the doctor: "CUDA is available" is not proof that CUDA works.

The doctor launches a real kernel, allocates and synchronizes on every accelerator it
finds, and turns each failure into one line that says what to do next. Notebook 00 and
``torchcontracts doctor`` call the same ``diagnose`` function.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import shutil
import sys
from typing import Any

import torch

__all__ = ["DeviceReport", "Report", "best_device", "diagnose", "render"]


@dataclasses.dataclass
class DeviceReport:
    """One device as measured: what it is, and whether real work ran on it."""

    name: str
    kind: str  # "cpu", "cuda", "mps"
    works: bool
    detail: str
    capability: str | None = None
    free_gib: float | None = None
    total_gib: float | None = None


@dataclasses.dataclass
class Report:
    """The doctor's findings. ``ok`` is False when something the learner expects is broken."""

    python: str
    torch: str
    build: str  # "CPU", "CUDA 12.4", "ROCm 6.2", ...
    platform: str
    threads: int
    devices: list[DeviceReport]
    problems: list[str]
    warnings: list[str] = dataclasses.field(default_factory=list)  # worth fixing, but the course still runs

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> str:
        data: dict[str, Any] = dataclasses.asdict(self)
        data["ok"] = self.ok
        return json.dumps(data, indent=2)


def _build() -> str:
    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return "CPU"


def _smoke(device: torch.device) -> None:
    """Allocate, run a matmul kernel, synchronize and read back: real work, not a flag."""
    a = torch.arange(64, dtype=torch.float32, device=device).reshape(8, 8)
    b = (a @ a.T).sum()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    expected = float((torch.arange(64.0).reshape(8, 8) @ torch.arange(64.0).reshape(8, 8).T).sum())
    got = float(b.cpu())
    if got != expected:
        raise RuntimeError(f"wrong result from a matmul: {got} != {expected}")


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:200]


def _cuda_devices(problems: list[str]) -> list[DeviceReport]:
    out = []
    try:
        available = torch.cuda.is_available()
    except Exception as err:  # a broken driver can raise here
        problems.append(f"CUDA check raised {_first_line(err)}: reinstall the NVIDIA driver or a matching torch build")
        return out
    if not available:
        if torch.version.cuda and os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
            problems.append("this torch is a CUDA build but CUDA_VISIBLE_DEVICES is empty: unset it to use the GPU")
        return out
    for i in range(torch.cuda.device_count()):
        dev = torch.device("cuda", i)
        try:
            name = torch.cuda.get_device_name(i)
            major, minor = torch.cuda.get_device_capability(i)
            _smoke(dev)
            free, total = torch.cuda.mem_get_info(i)
            rep = DeviceReport(
                name,
                "cuda",
                True,
                "kernel launched, allocated, synchronized",
                f"{major}.{minor}",
                free / 2**30,
                total / 2**30,
            )
            if free / total < 0.1:
                problems.append(
                    f"cuda:{i} has only {free / 2**30:.1f} GiB free: close other GPU processes (nvidia-smi)"
                )
        except Exception as err:
            rep = DeviceReport(f"cuda:{i}", "cuda", False, _first_line(err))
            problems.append(f"cuda:{i} is reported available but a real kernel failed: {_first_line(err)}")
        out.append(rep)
    return out


CPU_WHEEL = "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cpu"
CUDA_WHEEL = "pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128"


def nvidia_driver_present() -> bool:
    """True when an NVIDIA driver is loaded here (its device files or its version file exist)."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def wheel_warnings(cuda_build: bool, gpu_works: bool, driver: bool) -> list[str]:
    """A one-line warning when the torch build does not fit the machine, with the command that fixes it."""
    if cuda_build and not gpu_works and not driver:
        return [
            f"this torch ({torch.__version__}) is a CUDA build, which brings gigabytes of CUDA libraries, but this "
            f"machine has no NVIDIA GPU or driver: the CPU build is enough, in a fraction of the space: {CPU_WHEEL}"
        ]
    if not cuda_build and driver and not getattr(torch.version, "hip", None):
        return [
            f"this torch ({torch.__version__}) is a CPU build, but this machine has an NVIDIA driver: install a "
            f"CUDA build to run the GPU cells (pick the CUDA version your driver supports): {CUDA_WHEEL}"
        ]
    return []


def kernel_warnings() -> list[str]:
    """A one-line warning when Jupyter's "python3" kernel would run another Python than this one.

    Outside a venv Jupyter looks in the user's data folder first (inside one, the venv's own folder
    comes first unless JUPYTER_PREFER_ENV_PATH=0), so a kernelspec left by an old venv makes every
    notebook run on that venv's torch (or fail to start) while the doctor, run here, says all is well.
    """
    try:
        from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

        try:
            exe = KernelSpecManager().get_kernel_spec("python3").argv[0]
        except NoSuchKernel:
            return []
    except Exception:  # Jupyter not installed: nothing to compare
        return []
    found = shutil.which(exe) if not os.path.isabs(exe) else (exe if os.path.exists(exe) else None)
    if found and os.path.realpath(found) == os.path.realpath(sys.executable):
        return []
    if found and not os.path.isabs(exe):  # a bare "python": fine when it is this one
        return []
    return [
        f"Jupyter's python3 kernel runs {exe}{'' if found else ' (missing)'}, not this Python "
        f"({sys.executable}), so notebooks would use another torch: {KERNEL_FIX}"
    ]


KERNEL_FIX = "python -m ipykernel install --user --name python3"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("+")[0].split(".")[:3] if x.isdigit())


def tested_torch() -> list[str]:
    """The torch builds the course's CI tests: the ledgers the package keeps, one per build (data/ledgers/)."""
    from pathlib import Path

    found = [
        p.stem.removeprefix("torch-")
        for p in (Path(__file__).resolve().parents[1] / "data" / "ledgers").glob("torch-*.csv")
    ]
    return sorted(found, key=_release)


def version_warnings(python: str, torch_version: str, requires_python: str | None) -> list[str]:
    """One line each when this Python or torch is outside what the course's CI tests (lessons may still run)."""
    out: list[str] = []
    if requires_python:
        try:
            from packaging.specifiers import SpecifierSet

            if python not in SpecifierSet(requires_python):
                out.append(
                    f"Python {python} is outside the range the course's CI tests ({requires_python}): lessons may "
                    "still run; for a tested set-up make the venv with one of those Pythons"
                )
        except Exception:  # packaging missing or a malformed spec: nothing to say
            pass
    tested = tested_torch()
    if tested:
        here, oldest, newest = _release(torch_version), _release(tested[0]), _release(tested[-1])
        if here < oldest:
            out.append(
                f"torch {torch_version} is older than the oldest the course's CI tests ({tested[0]}): "
                f"pip install 'torch>={tested[0].split('+')[0]}'"
            )
        elif here[:2] > newest[:2]:
            out.append(
                f"torch {torch_version} is newer than the newest the course's CI tests ({tested[-1]}): lessons should "
                "run (they pick moved APIs at run time); lesson 10 lists the verdicts of each tested build"
            )
    return out


def _requires_python() -> str | None:
    try:
        from importlib.metadata import metadata

        return metadata("torchcontracts")["Requires-Python"]
    except Exception:  # not installed (helpers/ on PYTHONPATH, as on the GPU kit's machine)
        return None


def diagnose() -> Report:
    """Check this machine the way a lesson will use it, and collect one-line problems."""
    problems: list[str] = []
    devices = []
    try:
        _smoke(torch.device("cpu"))
        devices.append(DeviceReport(platform.processor() or platform.machine(), "cpu", True, "matmul ran"))
    except Exception as err:
        devices.append(DeviceReport("cpu", "cpu", False, _first_line(err)))
        problems.append(f"a CPU matmul failed: {_first_line(err)}: reinstall torch")
    devices += _cuda_devices(problems)
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        try:
            _smoke(torch.device("mps"))
            devices.append(DeviceReport("Apple GPU", "mps", True, "kernel launched and synchronized"))
        except Exception as err:
            devices.append(DeviceReport("Apple GPU", "mps", False, _first_line(err)))
            problems.append(f"MPS is reported available but a kernel failed: {_first_line(err)}")
    gpu_works = any(d.kind == "cuda" and d.works for d in devices)
    return Report(
        python=sys.version.split()[0],
        torch=torch.__version__,
        build=_build(),
        platform=f"{platform.system()} {platform.machine()}",
        threads=torch.get_num_threads(),
        devices=devices,
        problems=problems,
        warnings=wheel_warnings(bool(torch.version.cuda), gpu_works, nvidia_driver_present())
        + kernel_warnings()
        + version_warnings(platform.python_version(), torch.__version__, _requires_python()),
    )


def best_device() -> torch.device:
    """The device lessons use: a working CUDA GPU if there is one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def render(report: Report) -> str:
    """One screen of text: versions, devices, and a verdict line."""
    lines = [
        "Torch Contracts doctor",
        f"  Python {report.python} | torch {report.torch} | build: {report.build} | {report.platform}",
        f"  CPU threads used by torch: {report.threads}",
    ]
    for d in report.devices:
        mark = "ok  " if d.works else "FAIL"
        extra = ""
        if d.capability:
            extra = f" | capability {d.capability} | {d.free_gib:.1f}/{d.total_gib:.1f} GiB free"
        lines.append(f"  [{mark}] {d.kind}: {d.name}{extra} | {d.detail}")
    if not any(d.kind != "cpu" for d in report.devices):
        lines.append("  No GPU here: every lesson runs on the CPU; CUDA-only cells print why they skip.")
    lines += [f"WARNING: {w}" for w in report.warnings]
    if report.ok:
        lines.append("RESULT: ready for the course.")
    else:
        lines += [f"PROBLEM: {p}" for p in report.problems]
    return "\n".join(lines)

"""The doctor proves the machine works, and fails with one line when CUDA only pretends to work."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from torchcontracts.cli import main
from torchcontracts.core.device import diagnose

# A simulated broken CUDA state: torch says a GPU is available, but every real call into it fails,
# as with a driver too old for the wheel's CUDA runtime.
BROKEN_CUDA = """
import sys, torch
def broken(*a, **k):
    raise RuntimeError("CUDA driver version is insufficient for CUDA runtime version")
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_name = broken
from torchcontracts.cli import main
sys.exit(main(["doctor"]))
"""


def test_doctor_exits_0_and_reports_a_working_cpu(capsys):
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert f"torch {torch.__version__}" in out and "RESULT: ready" in out


def test_doctor_json_is_machine_readable(capsys):
    main(["doctor", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["devices"][0]["kind"] == "cpu" and data["devices"][0]["works"] is True


def test_doctor_exits_1_with_one_line_reason_when_cuda_only_pretends():
    proc = subprocess.run([sys.executable, "-c", BROKEN_CUDA], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    problems = [line for line in proc.stdout.splitlines() if line.startswith("PROBLEM:")]
    assert len(problems) == 1 and "driver version is insufficient" in problems[0]
    assert "Traceback" not in proc.stdout + proc.stderr


def test_diagnose_flags_a_kernel_that_returns_wrong_values(monkeypatch):
    import torchcontracts.core.device as device

    def wrong_smoke(dev):
        raise RuntimeError("wrong result from a matmul: 1.0 != 2.0")

    monkeypatch.setattr(device, "_smoke", wrong_smoke)
    report = diagnose()
    assert not report.ok and "CPU matmul failed" in report.problems[0]


def test_a_cuda_build_without_a_gpu_or_driver_gets_a_one_line_warning_and_the_cpu_wheel_command():
    from torchcontracts.core.device import CPU_WHEEL, wheel_warnings

    (line,) = wheel_warnings(cuda_build=True, gpu_works=False, driver=False)
    assert "CUDA build" in line and line.endswith(CPU_WHEEL) and "\n" not in line
    assert "--index-url https://download.pytorch.org/whl/cpu" in CPU_WHEEL


def test_a_cpu_build_on_a_machine_with_an_nvidia_driver_is_told_to_install_a_cuda_build():
    from torchcontracts.core.device import CUDA_WHEEL, wheel_warnings

    (line,) = wheel_warnings(cuda_build=False, gpu_works=False, driver=True)
    assert "CPU build" in line and line.endswith(CUDA_WHEEL)


def test_a_build_that_fits_gets_no_warning():
    from torchcontracts.core.device import wheel_warnings

    assert wheel_warnings(cuda_build=True, gpu_works=True, driver=True) == []
    assert wheel_warnings(cuda_build=False, gpu_works=False, driver=False) == []


def test_the_doctor_warns_but_still_exits_0(monkeypatch, capsys):
    import torchcontracts.core.device as device
    from torchcontracts.cli import main

    monkeypatch.setattr(device, "wheel_warnings", lambda *a: ["the build does not fit: do this"])
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "WARNING: the build does not fit: do this" in out and "RESULT: ready for the course." in out


def test_doctor_warns_when_jupyters_python3_kernel_is_another_python_and_its_command_fixes_it(tmp_path):
    """A kernelspec left by a deleted venv: the doctor names it, and the command it prints removes the warning."""
    import json
    import os
    import subprocess
    import sys

    from torchcontracts.core.device import KERNEL_FIX

    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": ["/gone/.venv/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "stale",
                "language": "python",
            }
        )
    )
    # Outside a venv Jupyter reads the user's folder first; inside one (CI's venv has its own kernelspec)
    # JUPYTER_PREFER_ENV_PATH=0 restores that order, so the stale spec wins as it would for that user.
    env = {**os.environ, "JUPYTER_DATA_DIR": str(tmp_path), "JUPYTER_PREFER_ENV_PATH": "0"}
    doctor = [sys.executable, "-m", "torchcontracts", "doctor"]
    before = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    warned = [ln for ln in before.stdout.splitlines() if "python3 kernel runs /gone/.venv/bin/python" in ln]
    assert before.returncode == 0 and len(warned) == 1 and KERNEL_FIX in warned[0], before.stdout
    fix = KERNEL_FIX.replace("python ", f"{sys.executable} ", 1).split()
    subprocess.run(fix, env=env, check=True, capture_output=True, timeout=120)
    after = subprocess.run(doctor, env=env, capture_output=True, text=True, timeout=120)
    assert after.returncode == 0 and "python3 kernel runs" not in after.stdout, after.stdout


def test_a_python_or_torch_outside_what_ci_tests_gets_a_one_line_warning():
    from torchcontracts.core.device import tested_torch, version_warnings

    tested = tested_torch()
    assert len(tested) >= 2, tested  # the kept ledgers: one per CI build
    oldest, newest = tested[0].split("+")[0], tested[-1].split("+")[0]
    assert version_warnings("3.12.1", f"{oldest}+cu130", ">=3.11,<3.13") == []
    assert version_warnings("3.11.7", newest, ">=3.11,<3.13") == []
    (py,) = version_warnings("3.13.0", newest, ">=3.11,<3.13")
    assert "Python 3.13.0" in py and ">=3.11,<3.13" in py and "\n" not in py
    (old,) = version_warnings("3.11.7", "2.9.1+cpu", ">=3.11,<3.13")
    assert "older" in old and f"torch>={oldest}" in old
    major, minor = (int(x) for x in newest.split(".")[:2])
    (new,) = version_warnings("3.11.7", f"{major}.{minor + 1}.0", ">=3.11,<3.13")
    assert "newer" in new and "lesson 10" in new
    assert version_warnings("3.11.7", f"{newest}.post1", None) == []  # no spec known: nothing said about Python

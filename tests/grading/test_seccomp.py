"""grading.seccomp: a learner's process cannot make a user namespace, under any system call number it could try,
and threads, subprocesses and torch still work under the filter."""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys

import pytest

from torchcontracts.grading.seccomp import program

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or program() is None, reason="a seccomp filter exists for Linux x86-64/AArch64"
)

_CHILD = r"""
import ctypes, json, os, subprocess, sys, threading
from torchcontracts.grading.seccomp import CLONE_NEWUSER, install
libc = ctypes.CDLL(None, use_errno=True)
found = {}
if sys.argv[1] == "filtered":
    found["installed"] = install()
found["cmd_unshare"] = subprocess.run(["unshare", "-U", "true"], capture_output=True).returncode
found["unshare"] = libc.unshare(CLONE_NEWUSER)  # last: it moves this process into the namespace
found["unshare_errno"] = ctypes.get_errno()
if sys.argv[2] == "x86_64":
    found["x32_unshare"] = libc.syscall(0x40000000 | 272, CLONE_NEWUSER)  # the x32 number of unshare
    found["clone3"] = libc.syscall(435, 0, 0)
    found["clone3_errno"] = ctypes.get_errno()
box = []
t = threading.Thread(target=lambda: box.append(sum(range(10))))
t.start(); t.join()
found["thread"] = box == [45]
found["subprocess"] = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout
import torch
found["torch"] = float(torch.ones(256, 256).sum())
print(json.dumps(found))
"""


def _child(mode: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, platform.machine()], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_filter_denies_a_new_user_namespace_and_leaves_the_rest_working():
    found = _child("filtered")
    assert found["installed"] is True
    assert found["unshare"] == -1 and found["unshare_errno"] == 1, found  # EPERM
    assert found["cmd_unshare"] != 0, found  # util-linux's unshare -U, a child process: it inherits the filter
    if platform.machine() == "x86_64":
        assert found["x32_unshare"] == -1, found
        assert found["clone3"] == -1 and found["clone3_errno"] == 38, found  # ENOSYS: glibc falls back to clone
    assert found["thread"] and found["subprocess"].strip() == "42" and found["torch"] == 256 * 256, found


def test_without_the_filter_this_machine_does_allow_a_user_namespace():
    """What the filter is for: here, with no filter, the same call succeeds (where the host allows it)."""
    found = _child("plain")
    if found["unshare"] != 0:
        pytest.skip(f"this host allows no user namespaces anyway (errno {found['unshare_errno']})")
    assert found["cmd_unshare"] == 0, found


def test_the_program_has_no_jump_past_its_end():
    for machine in ("x86_64", "aarch64"):
        prog = program(machine)
        assert prog is not None
        for i, (code, jt, jf, _k) in enumerate(prog):
            if code & 0x07 == 0x05:  # a jump
                assert i + 1 + max(jt, jf) < len(prog), (machine, i)
        assert prog[-1][0] == 0x06 and prog[-2][0] == 0x06  # the program ends in returns
    assert program("riscv64") is None


def test_a_graded_kernel_runs_under_the_filter():
    """procs.limit, which every kernel and artefact job calls before learner code, installs it."""
    code = (
        "import ctypes, json; from torchcontracts.grading.procs import limit; "
        "limit(mem=0, fsize=0, nproc=0, uid=None); "
        "print(json.dumps(ctypes.CDLL(None).unshare(0x10000000)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout) == -1, out.stderr[-1000:]
    assert os.getpid()  # this process was not filtered
    assert ctypes.CDLL(None).unshare(0) == 0

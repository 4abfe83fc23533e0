"""Nothing a learner's graded kernel can import answers a task (``grading.hidden``).

1. Inside the grader's own bubblewrap sandbox (``sandbox.bwrap_argv``, as the fork server gets it), a script
   imports every ``torchcontracts`` module and lists its public callables. Each grader-only module is the
   stand-in there (its names are placeholders that raise), and the same names are real outside.
2. Every public callable the sandboxed kernel can import, that is not a placeholder and whose signature
   takes the task function's positional arguments, is run as the learner's function through each task's
   HIDDEN checks (labs 01-07, in-process, ``Check.run_local``): none may pass. Each attempt runs in a
   forked child inside a second bubblewrap sandbox that sees the real package (a read-only system, its own
   pid namespace, no network), so a course helper called with odd arguments cannot harm the test run.

``KNOWN_ANSWERS`` lists the lesson helpers that do answer a task today: the task has to change (its owner's
job), not the lesson. Each is a strict xfail: when the task no longer accepts it, remove it from the list.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from conftest import ROOT
from torchcontracts.course import lab_ids
from torchcontracts.grading.forkserver import clean_env
from torchcontracts.grading.hidden import GRADER_ONLY, NOT_YET_HIDDEN
from torchcontracts.grading.sandbox import bwrap_argv, bwrap_path, kernel_uid

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap is not installed or cannot make namespaces")

# (lab, task, "module.name") -> why: a public name a graded kernel can import that passes the task's hidden
# checks. Not fixed here: the lesson stays as it is and the lab's owner changes the task. Each is a strict xfail.
# None today: lab 03's t3 answer (``model_answer``) moved to the grader-only ``lab03_judges``.
KNOWN_ANSWERS: dict[tuple[str, str, str], str] = {}

# The listing, run in the grader's sandbox: every torchcontracts module, its public callables, and whether each
# is a grader-only placeholder; plus, for PROBE (module -> names), what those names resolve to there.
_LIST = r"""
import importlib, inspect, json, pkgutil, sys
import torchcontracts
probe = json.loads(sys.argv[1])
names = ["torchcontracts"] + sorted(
    m.name for m in pkgutil.walk_packages(torchcontracts.__path__, "torchcontracts.", onerror=lambda n: None)
)
out = {"callables": [], "errors": {}, "probe": {}, "stub": {}}
for name in names:
    if name.rsplit(".", 1)[-1] == "__main__":
        continue
    try:
        mod = importlib.import_module(name)
    except BaseException as err:
        out["errors"][name] = f"{type(err).__name__}: {err}"[:200]
        continue
    for key in sorted(dir(mod)):
        if key.startswith("_"):
            continue
        try:
            obj = getattr(mod, key)
        except Exception:
            continue
        if not callable(obj) or inspect.ismodule(obj):
            continue
        origin = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', key)}"
        out["callables"].append([name, key, bool(getattr(obj, "__grader_only__", False)), origin])
for name, keys in probe.items():
    mod = importlib.import_module(name)
    out["stub"][name] = bool(getattr(mod, "GRADER_ONLY", False)) and mod.__file__.endswith(".py")
    for key in keys:
        try:
            obj = getattr(mod, key)
        except Exception as err:
            out["probe"][f"{name}.{key}"] = f"{type(err).__name__}"
            continue
        out["probe"][f"{name}.{key}"] = "placeholder" if getattr(obj, "__grader_only__", False) else "real"
print("@@" + json.dumps(out))
"""

# The attempts, run in a sandbox that shows the real package: each candidate through each task's hidden checks.
# Per task, a forked child (as a uid of its own when the sandbox runs as root, so that it cannot stop or kill this
# script: the grader's own helpers do that) tries the candidates one after another and says how each went; when
# one hangs, dies or leaves the process changed (limits, folder, environment, open files), a fresh child goes on
# after it. The report pipe sits at fd 1000 or above, out of reach of a case's small ints.
_ATTEMPT = r"""
import ast, fcntl, inspect, json, os, resource, select, signal, sys, time
import torch
torch.set_num_threads(1)
from pathlib import Path
from torchcontracts.core.nbio import nbformat
from torchcontracts.grading.plan import lab_spec
from torchcontracts.labs.format import cell_meta

root, labs, candidates, uid = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
PER_CHECK_S, PER_TRY_S = 5, 12
GRADING = "torchcontracts.grading."
LIMITS = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]


class Late(BaseException):
    pass


def _late(*_):
    raise Late()


def arity(lab, target):
    nb = nbformat.read(root / "labs" / f"{lab}.ipynb", as_version=4)
    for cell in nb.cells:
        if cell.get("cell_type") != "code" or cell_meta(cell).get("role") != "solution":
            continue
        for node in ast.walk(ast.parse(cell.source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == target:
                a = node.args
                return len(a.posonlyargs) + len(a.args) - len(a.defaults)
    raise LookupError(f"{lab}: no def {target} in a solution cell")


def state():  # what a candidate may have changed for the next one: a change sends the rest to a fresh child
    fds = sorted(os.listdir("/proc/self/fd"))
    return (os.getcwd(), dict(os.environ), [resource.getrlimit(r) for r in LIMITS], os.getpgid(0), fds)


COST = {}  # (check, case label) -> seconds it last took: the cheapest case runs first


def passes(check, fn, beat):
    # Check.run_local's verdict (no case raises, no row fails, some row is judged), one case at a time, the
    # cheapest first, stopping at the first that fails: most candidates fail a cheap case.
    rows = 0
    for case in sorted(check.cases(0), key=lambda c: COST.get((check.name, c.label), 0.0)):
        beat()  # a sign of life per case: only a silence of PER_TRY_S reads as hung
        began = time.monotonic()
        signal.alarm(PER_CHECK_S)
        out = check.invoke_all(fn, case)
        got = check.judge(case, out)
        signal.alarm(0)
        COST[(check.name, case.label)] = time.monotonic() - began
        if not isinstance(got, list) or any(not getattr(r, "ok", False) for r in got):
            return False
        rows += len(got)
    return rows > 0


def child(checks, fns, write):
    os.setpgid(0, 0)
    if uid >= 0:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGALRM, _late)
    before = state()
    for j, fn in fns:
        os.write(write, f"{j} start\n".encode())
        try:
            ok = all(passes(check, fn, lambda: os.write(write, f"{j} beat\n".encode())) for check in checks)
        except BaseException:
            ok = False
        signal.alarm(0)
        os.write(write, f"{j} {'PASS' if ok else 'fail'}\n".encode())
        if state() != before:
            break
    os._exit(0)


def attempts(checks, fns, silence=PER_TRY_S):
    said = {}
    todo = list(fns)
    while todo:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            # the report pipe moves far above the small numbers a hidden case passes: a candidate that treats a
            # shape's ints as files (build_ledger opens and closes "notebooks" 2, 0, 3, ...) must not close it
            high = fcntl.fcntl(write, fcntl.F_DUPFD_CLOEXEC, 1000)
            os.close(write)
            try:
                child(checks, todo, high)
            finally:
                os._exit(0)
        os.close(write)
        buf, started = b"", None
        while True:
            ready, _, _ = select.select([read], [], [], silence)
            chunk = os.read(read, 65536) if ready else b""
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                j, what = line.decode().split()
                if what == "start":
                    started = int(j)
                elif what != "beat":
                    said[int(j)], started = what, None
        os.close(read)
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        if started is not None:
            said[started] = "hung or died"
        todo = [(j, fn) for j, fn in todo if j not in said]
    return said


result = {"passed": [], "tried": 0, "odd": [], "by_lab_s": {}}
for lab in labs:
    began = time.monotonic()
    spec = lab_spec(root, lab)
    for task in spec.tasks.values():
        hidden = spec.checks_for(task.id, hidden=True)
        n = arity(lab, task.target)
        fns = []
        for j, (module, name) in enumerate(candidates):
            try:
                fn = getattr(__import__(module, fromlist=["_"]), name)
                inspect.signature(fn).bind(*range(n))
            except Exception:
                continue
            fns.append((j, fn))
        result["tried"] += len(fns)
        said = attempts(hidden, fns)
        # a busy machine can stall a case past the silence limit: a course name that hung or died gets one more
        # try on its own, with 5 times the patience (the grader's own machinery may hang; it is not retried)
        again = [(j, fn) for j, fn in fns if said.get(j) == "hung or died" and not candidates[j][0].startswith(GRADING)]
        said.update(attempts(hidden, again, silence=5 * PER_TRY_S))
        for j, what in sorted(said.items()):
            where = [lab, task.id, ".".join(candidates[j])]
            if what == "PASS":
                result["passed"].append(where)
            elif what != "fail":
                result["odd"].append([*where, what])
    result["by_lab_s"][lab] = round(time.monotonic() - began, 1)
print("@@" + json.dumps(result))
"""


def _run(argv: list[str], timeout: float) -> dict[str, Any]:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=clean_env(), cwd="/tmp")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("@@")]
    assert proc.returncode == 0 and lines, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    return json.loads(lines[-1][2:])


def _public_callables(module: str) -> list[str]:
    mod = importlib.import_module(module)
    return [k for k in dir(mod) if not k.startswith("_") and callable(getattr(mod, k))]


@pytest.fixture(scope="module")
def sandboxed() -> dict[str, Any]:
    """What a graded kernel sees: the listing, run under the grader's own bwrap command line."""
    probe = {name: _public_callables(name) for name in GRADER_ONLY}
    with tempfile.TemporaryDirectory(prefix="tc-importable-") as scratch:
        argv = bwrap_argv(Path(scratch), ROOT, drop_uid=False)
        return _run([*argv, sys.executable, "-c", _LIST, json.dumps(probe)], timeout=300)


def _under_tmp() -> list[str]:
    """The tmpfs over /tmp hides a venv or a course that lives there (a clean clone in /tmp): bind them back."""
    roots = {Path(p).resolve() for p in (sys.prefix, sys.executable, ROOT, *sys.path) if p}
    tmp = [p for p in roots if p.is_relative_to("/tmp") and p != Path("/tmp") and p.exists()]
    top = sorted(p for p in tmp if not any(q != p and q in p.parents for q in tmp))
    return [arg for p in top for arg in ("--ro-bind", str(p), str(p))]


@pytest.fixture(scope="module")
def answers(sandboxed) -> dict[str, Any]:
    """Which importable, non-placeholder callables pass which task's hidden checks."""
    seen: dict[str, tuple[str, str]] = {}
    for module, name, placeholder, origin in sandboxed["callables"]:
        if not placeholder and origin.startswith("torchcontracts."):  # torch's and typing's names are no course's
            seen.setdefault(origin, (module, name))  # a re-exported object is tried once
    candidates = sorted(seen.values())
    uid = kernel_uid(0) if os.geteuid() == 0 else -1
    if uid < 0:  # no uid to run the attempts as: leave out the grader's own machinery, which stops and kills processes
        candidates = [c for c in candidates if not c[0].startswith("torchcontracts.grading.")]
    argv = [
        bwrap_path(),
        "--ro-bind", "/", "/",
        "--dev", "/dev",
        "--proc", "/proc",
        "--tmpfs", "/tmp",
        *_under_tmp(),
        "--unshare-pid",
        "--unshare-net",
        "--unshare-ipc",
        "--die-with-parent",
        "--new-session",
        *(["--cap-add", "CAP_SETUID,CAP_SETGID"] if os.geteuid() == 0 else []),
        sys.executable, "-c", _ATTEMPT, str(ROOT), json.dumps(lab_ids()), json.dumps(candidates), str(uid),
    ]  # fmt: skip
    return _run(argv, timeout=900)


def test_grader_only_modules_are_placeholders_in_the_sandbox_and_real_outside(sandboxed):
    for name in GRADER_ONLY:
        assert importlib.import_module(name).__file__.endswith(".py")
        assert not getattr(importlib.import_module(name), "GRADER_ONLY", False), f"{name} is the stand-in outside"
        assert sandboxed["stub"][name], f"{name} is not the stand-in inside the sandbox"
        for key in _public_callables(name):
            assert not getattr(getattr(importlib.import_module(name), key), "__grader_only__", False)
            assert sandboxed["probe"][f"{name}.{key}"] == "placeholder", f"{name}.{key} is real in the sandbox"
    defined = [(m, k) for m, k, _, _ in sandboxed["callables"] if m in GRADER_ONLY]
    assert not defined, f"the stand-in defines public callables: {defined}"
    assert not set(GRADER_ONLY) & set(NOT_YET_HIDDEN)


def test_the_hidden_paths_follow_the_installed_package(tmp_path, monkeypatch):
    """A copy in site-packages (CI's `pip install` from a clean clone) is hidden where it is; the course's own
    helpers/ only when the sandbox shows it."""
    import shutil

    import torchcontracts
    from torchcontracts.grading import hidden

    site = tmp_path / "site-packages" / "torchcontracts"
    for name in GRADER_ONLY:
        source = hidden.module_file(site, name)
        source.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(hidden.module_file(Path(torchcontracts.__file__).parent, name), source)
    (site / "__init__.py").write_text("")
    monkeypatch.setattr(torchcontracts, "__file__", str(site / "__init__.py"))
    args = hidden.bwrap_hide_args([site.parent], ROOT)
    course = ROOT / "helpers" / "torchcontracts"
    for name in GRADER_ONLY:
        source = hidden.module_file(site, name)
        assert ["--ro-bind", str(hidden._STUB), str(source)] == args[
            args.index(str(source)) - 2 : args.index(str(source)) + 1
        ]
        assert str(source.parent / "__pycache__") in args
        assert str(hidden.module_file(course, name)) not in args  # not shown: nothing to hide
    both = hidden.bwrap_hide_args([site.parent, course], ROOT)
    assert all(str(hidden.module_file(course, name)) in both for name in GRADER_ONLY)


def test_every_module_imports_in_the_sandbox(sandboxed):
    # a module that fails to import there is one whose names nobody checked (and one a kernel cannot use)
    assert not sandboxed["errors"], sandboxed["errors"]
    assert len(sandboxed["callables"]) > 100


@pytest.mark.slow
def test_no_importable_name_passes_a_tasks_hidden_checks(answers):
    unknown = [tuple(p) for p in answers["passed"] if tuple(p) not in KNOWN_ANSWERS]
    assert answers["tried"] > 0
    assert not unknown, f"importable names that pass a task's hidden checks (lab, task, name): {unknown}"
    assert not answers[
        "odd"
    ] or all(  # an attempt that hung or died proves nothing; only the grader's own machinery may
        odd[2].startswith("torchcontracts.grading.") for odd in answers["odd"]
    ), answers["odd"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "known", [pytest.param(k, marks=pytest.mark.xfail(strict=True, reason=v)) for k, v in KNOWN_ANSWERS.items()]
)
def test_known_answer_no_longer_passes(answers, known):
    assert list(known) not in answers["passed"]


# The shortcut of the issue: lab 04's t2 answered by the course's own reference (``expected_intensity``).
_T2_SHORTCUT = """
from torchcontracts.lessons.l04_async.lab04_intensity import expected_intensity


def intensity(op, shapes, dtype="float32", stride=1, padding=0):
    flops, nbytes = expected_intensity(op, shapes, dtype, stride, padding)
    return {"flops": flops, "bytes": nbytes, "intensity": flops / nbytes}
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["bwrap", "none"])
def test_a_solution_that_imports_the_reference_scores_nothing_in_the_sandbox(tmp_path, mode):
    import nbformat

    from torchcontracts.grading.run import GradeOptions, grade_file
    from torchcontracts.labs.format import cell_meta

    lab = "lab04_timing"
    nb = nbformat.read(ROOT / "solutions" / f"{lab}.ipynb", as_version=4)
    t2 = [c for c in nb.cells if cell_meta(c).get("role") == "solution" and cell_meta(c).get("task") == "t2"]
    assert t2
    for cell in t2:
        cell.source = ""
    t2[0].source = _T2_SHORTCUT
    path = tmp_path / f"{lab}.ipynb"
    nbformat.write(nb, path)
    result = grade_file(path, GradeOptions(course=ROOT, lab=lab, cell_timeout=60, sandbox=mode))
    scores = {t.id: (t.score, t.max_score) for t in result.tasks}
    others = {k: v for k, v in scores.items() if k != "t2"}
    assert all(got == full for got, full in others.values()), [(t.id, t.reason) for t in result.tasks]
    if mode == "bwrap":  # the reference is a stand-in there: calling it raises
        assert scores["t2"][0] == 0, [(t.id, t.reason) for t in result.tasks]
    else:  # `none` hides nothing (README, "The sandbox"): the shortcut works, which is why it is the OS's job
        assert scores["t2"][0] == scores["t2"][1]

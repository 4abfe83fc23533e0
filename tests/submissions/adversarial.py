"""Adversarial lab01 submissions, generated from the course's own notebooks (no .ipynb is committed here:
nbval would try to run them). Each entry says what the learner did and the exact grade it must get.

``build(folder)`` writes every submission into ``folder`` and returns their expected grades.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Callable

import nbformat

ROOT = Path(__file__).resolve().parents[2]
LAB = "lab01_strides"
TASKS = ["t1", "t2", "t3", "t4", "t5"]
POINTS = {"t1": 2.0, "t2": 2.0, "t3": 3.0, "t4": 3.0, "t5": 2.0}
CELL_TIMEOUT = 10  # 3 s, then 6 s: a course cell once ran past 3 s on 2 busy cores in CI; 10 s is a wider margin
MEM_MB = 2048


def _checks_per_task() -> dict[str, int]:
    from torchcontracts.grading.plan import lab_spec

    spec = lab_spec(ROOT, LAB)
    return {t: len(spec.checks_for(t)) for t in spec.tasks}


CHECKS = _checks_per_task()
OK = {t: f"all {n} checks pass" for t, n in CHECKS.items()}
NOT_IMPLEMENTED = "not implemented"


@dataclasses.dataclass
class Expect:
    """The exact grade: per-task (score, reason), the total, and text the problems must contain."""

    tasks: dict[str, tuple[float, str]]
    problems: tuple[str, ...] = ()
    none: "Expect | None" = None  # the grade in `none` mode where it differs (what needs the OS)

    def in_mode(self, mode: str) -> "Expect":
        return self.none if mode == "none" and self.none is not None else self

    @property
    def total(self) -> float:
        return sum(s for s, _ in self.tasks.values())


def _solutions() -> dict[str, str]:
    nb = nbformat.read(ROOT / "solutions" / f"{LAB}.ipynb", as_version=4)
    return {
        c.metadata["torchcontracts"]["task"]: c.source
        for c in nb.cells
        if c.metadata.get("torchcontracts", {}).get("role") == "solution"
    }


def _blank() -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "labs" / f"{LAB}.ipynb", as_version=4)


def _role(cell: dict) -> str:
    return cell.get("metadata", {}).get("torchcontracts", {}).get("role", "")


def _task(cell: dict) -> str:
    return cell.get("metadata", {}).get("torchcontracts", {}).get("task", "")


def notebook(
    answers: dict[str, str | None] | None = None,
    *,
    solved: tuple[str, ...] = tuple(TASKS),
    edit: Callable[[nbformat.NotebookNode], None] | None = None,
) -> nbformat.NotebookNode:
    """The student lab with the reference answer for ``solved`` tasks, ``answers`` overriding (None deletes)."""
    sol = _solutions()
    nb = _blank()
    answers = answers or {}
    kept = []
    for cell in nb.cells:
        task = _task(cell) if _role(cell) == "solution" else ""
        if task in answers and answers[task] is None:
            continue
        if task in answers:
            cell.source = answers[task]
        elif task in solved:
            cell.source = sol[task]
        kept.append(cell)
    nb.cells = kept
    if edit:
        edit(nb)
    return nb


def _with(task: str, extra: str, *, before: bool = False) -> dict[str, str]:
    src = _solutions()[task]
    return {task: f"{extra}\n{src}" if before else f"{src}\n{extra}"}


def _edit_check_cells(nb: nbformat.NotebookNode) -> None:
    """Fake the t1 check cell, delete every other check cell, add a cell that empties the checks."""
    out = []
    for cell in nb.cells:
        if cell.cell_type == "code" and "lab.check(" in cell.source:
            if "contiguous_strides" in cell.source:
                cell.source = 'print("t1: 3/3 public checks pass")\nlab.checks.clear()'
                out.append(cell)
            continue
        out.append(cell)
    nb.cells = out


def _tamper(name: str, code: str, task: str = "t1") -> tuple[nbformat.NotebookNode, Expect]:
    reason = f"tampering detected: {name} replaced"
    return notebook(_with(task, code)), Expect({t: (0.0, reason) for t in TASKS}, (reason,))


def _full(**over: tuple[float, str]) -> dict[str, tuple[float, str]]:
    tasks = {t: (POINTS[t], OK[t]) for t in TASKS}
    tasks.update(over)
    return tasks


LOOP = """def sliding_windows(x, size, step):
    while True:
        pass

print(sliding_windows(torch.arange(10), 4, 2))"""

PARTIAL_T3 = """def sliding_windows(x, size, step):
    n = (x.shape[0] - size) // step + 1
    return x.as_strided((n, size), (step, 1))   # forgets x's own stride and offset

print(sliding_windows(torch.arange(10), 4, 2))"""

COPY_T4 = """def im2col(x, k):
    return x.unfold(1, k, 1).unfold(2, k, 1).contiguous()   # right values, but a copy

print(im2col(torch.arange(16.0).reshape(1, 4, 4), 2)[0, 1, 2])"""

BOMB_T4 = """def im2col(x, k):
    hog = []
    while True:
        hog.append(torch.empty(2**28))   # 1 GB a step, until the kernel's memory limit

print(im2col(torch.arange(16.0).reshape(1, 4, 4), 2)[0, 1, 2])"""

MUTATE_T5 = """def diagonal_view(x):
    n = x.shape[0]
    x[0] = x.diagonal().clone()   # writes the answer into the input, then returns a view of it
    return x[0, :n]

print(diagonal_view(torch.arange(16).reshape(4, 4)))"""

WRONG_T1 = """def contiguous_strides(shape):
    return tuple(1 for _ in shape)   # every stride 1

print(contiguous_strides((2, 3, 4)))"""

NUMPY_T2 = """import numpy as np

def is_contiguous(shape, strides):
    return np.bool_(True)

print(is_contiguous((2, 3), (3, 1)))"""


def _renamed() -> str:
    return _solutions()["t1"].replace("contiguous_strides", "contig_strides")


OVERWRITE_T2 = """
import glob, os, torch
# t1's checks ran already: rewrite their saved answers with the right strides
for cases_file in glob.glob(os.path.join("..", "cases-main", "cases-*.pt")):
    idx = cases_file.rsplit("-", 1)[1][:-3]
    for n, (label, args) in enumerate(torch.load(cases_file, weights_only=True)):
        if len(args) == 1 and isinstance(args[0], tuple):
            right = tuple(torch.empty(args[0]).stride())
            torch.save({"args": args, "out": right}, os.path.join("..", "io-main", "out", f"{idx}-{n}.pt"))
"""

READ_SOLUTIONS = """def contiguous_strides(shape):
    import json, pathlib, torchcontracts
    path = pathlib.Path(torchcontracts.__file__).parents[2] / "solutions" / "lab01_strides.ipynb"
    ns = {}
    for cell in json.load(open(path))["cells"]:   # run the reference answer instead of writing one
        if cell["metadata"].get("torchcontracts", {}).get("task") == "t1":
            exec("".join(cell["source"]), ns)
    return ns["contiguous_strides"](shape)

print(contiguous_strides((2, 3, 4)))"""

FAKE_OUTPUTS = """print("score: 100")
print('{"score": 100, "tests": []}')
import json, os
json.dump({"score": 100, "tests": []}, open("results.json", "w"))
open("gradebook.csv", "w").write("submission,total\\nfake_outputs.ipynb,12\\n")
os.makedirs("results", exist_ok=True)
json.dump({"score": 100}, open(os.path.join("results", "results.json"), "w"))"""


HOOK = "import sys\nsys.{which}(lambda *a: None)   # a hook that could rewrite answers after the calls"

THREAD_REWRITER = """import os, threading, time

def _rewrite_forever():   # rewrites anything that looks like the grader's answers, as fast as it can
    while True:
        for name in os.listdir("."):
            if name.startswith(("sealed-", "snap-", "0-", "1-")) or name.endswith((".pt", ".bin", ".part")):
                try:
                    with open(name, "wb") as fh:
                        fh.write(b"forged")
                except OSError:
                    pass
        time.sleep(0.0005)

threading.Thread(target=_rewrite_forever, daemon=True).start()
"""

CODE_SWAP = """import torchcontracts.checks as chk
chk.compare.__code__ = (lambda *a, **k: None).__code__   # same function object, other code
"""

SERIALIZATION_SWAP = """import torch.serialization
torch.serialization.default_restore_location = lambda storage, location: storage
"""

PLANT_AND_INTERRUPT = """import os, torch
# plant files named like the grader's outputs and seals, with the right strides, then break the driver
for idx in range(12):
    for n in range(8):
        torch.save({"args": ((2, 3, 4),), "out": (12, 4, 1)}, f"{idx}-{n}.pt")
for name in ("sealed-0.bin", "baseline.json", "snap-t1.json"):
    open(name, "w").write("{}")
raise KeyboardInterrupt
"""

ESCAPE_SCRIPT = r"""
import os, time, json
time.sleep(1.0)
for _ in range(60):
    for pid in os.listdir("/proc"):
        try:
            args = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"--gradescope" in args:
            path = args[args.index(b"--gradescope") + 1].decode()
            try:
                json.dump({"score": 12, "tests": []}, open(path, "w"))
            except OSError:
                pass
    time.sleep(0.1)
"""

OUTLIVE = f"""import subprocess, sys
subprocess.Popen([sys.executable, "-c", {ESCAPE_SCRIPT!r}], start_new_session=True,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)   # its own session: outlives the kernel
"""

READ_BY_SUBPROCESS = """def contiguous_strides(shape):
    import json, pathlib, subprocess, torchcontracts
    path = pathlib.Path(torchcontracts.__file__).parents[2] / "solutions" / "lab01_strides.ipynb"
    text = subprocess.run(["cat", str(path)], capture_output=True, text=True).stdout   # not `open`
    ns = {}
    for cell in json.loads(text)["cells"]:
        if cell["metadata"].get("torchcontracts", {}).get("task") == "t1":
            exec("".join(cell["source"]), ns)
    return ns["contiguous_strides"](shape)
"""

READ_BY_DIR_FD = """def contiguous_strides(shape):
    import json, os, torchcontracts
    course = os.open(os.path.dirname(os.path.dirname(os.path.dirname(torchcontracts.__file__))), os.O_RDONLY)
    fd = os.open("solutions/lab01_strides.ipynb", os.O_RDONLY, dir_fd=course)   # relative to a folder fd
    ns = {}
    for cell in json.loads(os.read(fd, 10_000_000))["cells"]:
        if cell["metadata"].get("torchcontracts", {}).get("task") == "t1":
            exec("".join(cell["source"]), ns)
    return ns["contiguous_strides"](shape)
"""

READ_BY_GIT = """def contiguous_strides(shape):
    import json, os, subprocess, torchcontracts
    course = os.path.dirname(os.path.dirname(os.path.dirname(torchcontracts.__file__)))
    text = subprocess.run(["git", "-C", course, "show", "HEAD:solutions/lab01_strides.ipynb"],
                          capture_output=True, text=True).stdout
    ns = {}
    for cell in json.loads(text)["cells"]:
        if cell["metadata"].get("torchcontracts", {}).get("task") == "t1":
            exec("".join(cell["source"]), ns)
    return ns["contiguous_strides"](shape)
"""

READ_AFTER_GC = """def contiguous_strides(shape):
    import gc, json, pathlib, torchcontracts
    for obj in gc.get_objects():   # empty the audit hook's own state (its closure cells), then read
        try:   # a dead weakref.proxy raises ReferenceError on getattr
            is_hook = callable(obj) and getattr(obj, "__name__", "") == "hook" and getattr(obj, "__closure__", None)
        except ReferenceError:
            continue
        if is_hook:
            for cell in obj.__closure__:
                try:
                    if isinstance(cell.cell_contents, (set, frozenset)):
                        cell.cell_contents = frozenset()
                except ValueError:
                    pass
    path = pathlib.Path(torchcontracts.__file__).parents[2] / "solutions" / "lab01_strides.ipynb"
    ns = {}
    for cell in json.load(open(path))["cells"]:
        if cell["metadata"].get("torchcontracts", {}).get("task") == "t1":
            exec("".join(cell["source"]), ns)
    return ns["contiguous_strides"](shape)
"""

LEAK_HIDDEN = """SEEN = []

def contiguous_strides(shape):
    SEEN.append(tuple(shape))   # every input the grader ever passes, hidden ones too
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))
"""

LEAK_HIDDEN_T2 = """def is_contiguous(shape, strides):
    raise ValueError("seen so far: " + repr(SEEN))   # echo them through public feedback
"""

LEAK_ENV = r"""def contiguous_strides(shape):
    import os
    found = []
    for p in os.listdir("/proc"):
        try:
            found.append(open(f"/proc/{p}/environ", "rb").read().decode(errors="replace").replace("\0", " "))
        except OSError:
            pass
    raise ValueError(" ".join(os.environ.values()) + " " + " ".join(found))
"""

SET_VIEW_T5 = """import torch

def diagonal_view(x):
    n = x.shape[0]
    big = torch.empty(x.numel() + n, dtype=x.dtype)
    big[: x.numel()] = x.contiguous().flatten()
    big[x.numel():] = x.diagonal()                      # a copy of the diagonal...
    x.set_(big.untyped_storage(), 0, x.shape, (x.shape[1], 1))   # ...moved into the input's new storage
    return big[x.numel():]                              # shares storage with x, but is no view of it
"""

HUGE_T1 = """import torch

def contiguous_strides(shape):
    return torch.zeros(2**25)   # 128 MB: over the grader's cap on one answer
"""


WRONG_T3 = """def sliding_windows(x, size, step):
    n = (x.shape[0] - size) // step + 1
    return x.as_strided((n, size), (1, 1), x.storage_offset())   # wrong strides
"""

_FIX_RECORD = """
    f = sys._getframe(1)
    while f is not None and f.f_code.co_name != "drive":   # find the driver's record, after the call returned
        f = f.f_back
    rec = f.f_locals.get("record") if f is not None else None
    if type(rec) is dict and "out" in rec and len(rec.get("args", ())) == 3:
        x, size, step = rec["args"]
        rec["out"] = x.unfold(0, size, step)                 # the right windows, from the learner's own code
"""

PACKAGE_TAGGER = (
    WRONG_T3
    + """
import sys, torch, torch.serialization

def _tag(storage):   # torch.save calls every registered tagger while it writes the answer"""
    + _FIX_RECORD
    + """
    return None

torch.serialization.register_package(-1000, _tag, lambda obj, location: None)
"""
)

COPYREG_REDUCER = (
    WRONG_T3
    + """
import copyreg, sys, torch

def _reduce(t):   # the pickler asks copyreg.dispatch_table before Tensor.__reduce_ex__"""
    + _FIX_RECORD
    + """
    del copyreg.dispatch_table[torch.Tensor]
    try:
        return t.__reduce_ex__(2)
    finally:
        copyreg.dispatch_table[torch.Tensor] = _reduce

copyreg.dispatch_table[torch.Tensor] = _reduce
"""
)

TIMER_HANDLER = """
import signal, sys, torch

def _fix(signum, frame):   # runs between the driver's own bytecodes, after the call returned
    f = frame
    while f is not None and f.f_code.co_name != "drive":
        f = f.f_back
    rec = f.f_locals.get("record") if f is not None else None
    if type(rec) is dict and "out" in rec and len(rec.get("args", ())) == 1 and type(rec["args"][0]) is tuple:
        rec["out"] = tuple(torch.empty(rec["args"][0]).stride())

signal.signal(signal.SIGALRM, _fix)
signal.setitimer(signal.ITIMER_REAL, 0.00005, 0.00005)
"""

# Records made where the learner's code runs: the driver's list of (name, bytes) is reachable from the learner's
# own call by walking frames. Before the fix the grader kept the last record of a name, took any name a step sealed,
# and let a gc callback (gc.set_threshold(1): one runs on nearly every allocation) rewrite a record between its
# return and the seal. The t1 function returns wrong strides, and:
# FORGE_EARLIER adds, in the call for case n, a second record for case n - 1 (the right strides) under its name;
# FORGE_OTHER seals a record for a check this step does not run;
# REPLACE_EARLIER swaps, in the call for case n, case n - 1's record for the right strides (same name, no duplicate);
# GC_REPLACE swaps the newest record for the right one from a gc callback, whenever one runs.
# Each record is now accepted once, from the step that asked for it, and must match the digest the driver kept as it
# took each one (a local of the driver's frame, which frame walking can read but not rebind); from a return to the
# next call or the seal gc is off. All four are tampering: every task scores 0.
FORGE_RECORD = """
import gc, io, sys, torch

def _drive_frame(depth):
    f = sys._getframe(depth)
    while f is not None and f.f_code.co_name != "drive":
        f = f.f_back
    return f

def _right(args):
    buf = io.BytesIO()
    torch.save({{"args": args, "out": tuple(torch.empty(args[0]).stride())}}, buf)
    return buf.getvalue()

def _forge(f):
    blobs, cases, n, job = (f.f_locals.get(k) for k in ("blobs", "cases", "n", "job"))
    if type(blobs) is list and type(n) is int and {cond}:
        {action}

def _on_gc(phase, info):
    f = _drive_frame(1)
    if f is not None and phase == "stop":
        _forge(f)

def contiguous_strides(shape):
    f = _drive_frame(2)
    if f is not None and {in_call}:
        _forge(f)
    return tuple(1 for _ in shape)   # wrong: every stride 1

if {gc}:
    gc.callbacks.append(_on_gc)
    gc.set_threshold(1)
"""
_EARLIER = "(blobs[-1][0], _right(tuple(cases[n - 1][1])))"
FORGE_EARLIER = FORGE_RECORD.format(
    cond="n > 0 and len(blobs) > 0", action=f"blobs.append({_EARLIER})", in_call=True, gc=False
)
FORGE_OTHER = FORGE_RECORD.format(
    cond="n == 0",
    action="blobs.append((f\"{job['check'] + 50}-0.pt\", _right((tuple(cases[0][1][0]),))))",
    in_call=True,
    gc=False,
)
REPLACE_EARLIER = FORGE_RECORD.format(
    cond="n > 0 and len(blobs) > 0", action=f"blobs[-1] = {_EARLIER}", in_call=True, gc=False
)
GC_REPLACE = FORGE_RECORD.format(
    cond="len(blobs) > 0 and blobs[-1][0].endswith('.pt')",
    action="blobs[-1] = (blobs[-1][0], _right(tuple(cases[int(blobs[-1][0].split('-')[1][:-3])][1])))",
    in_call=False,
    gc=True,
)

# The seal protocol's token is readable from the driver's frame. PLANT_SEAL writes, in its first call (t1's public
# step), a sealed file of its own under that token (the right strides for every case, the fingerprints as they are), then
# stops the kernel and itself from a fork, so that the grader finds "every process stopped" and takes the planted
# file. Before the fix the grader kept the first file it took and ignored the driver's own, which then left the kernel
# stopped until the step timed out (t1: 0, "timed out after 30 s"; the other tasks full marks). Now a second sealed
# file under one token is tampering, found at once, and the submission is resumed.
PLANT_SEAL = """
import base64, io, os, signal, sys, time, torch
from torchcontracts.grading import driver, protocol, watch

_planted = set()

def contiguous_strides(shape):
    f = sys._getframe(1)
    while f is not None and f.f_code.co_name != "drive":
        f = f.f_back
    spec = f.f_locals.get("spec") if f is not None else None
    if type(spec) is dict and not _planted:  # the first step that calls it: t1's public checks
        _planted.add(spec["token"])
        blobs = []
        for job in spec["jobs"]:
            cases = torch.load(io.BytesIO(base64.b64decode(job["cases"])), weights_only=True)
            for n, (label, args) in enumerate(cases):
                buf = io.BytesIO()
                torch.save({"args": args, "out": tuple(torch.empty(tuple(args[0])).stride())}, buf)
                blobs.append((protocol.case_file(job["check"], n), buf.getvalue()))
        data = protocol.pack_sealed({"notes": [], "snapshot": watch.fingerprints(driver._watched())}, blobs)
        final = os.path.join(driver._STATE["io"], protocol.sealed_name(spec["token"]))
        with open(final + ".x", "wb") as fh:
            fh.write(data)
        pid = os.fork()
        if pid == 0:
            os.kill(os.getppid(), signal.SIGSTOP)
            time.sleep(0.2)
            os.rename(final + ".x", final)
            os.kill(os.getpid(), signal.SIGSTOP)
            os._exit(0)
        os.waitpid(pid, 0)
    return tuple(1 for _ in shape)   # wrong: every stride 1
"""

LEAK_BY_CLASS_NAME_WRAPPER = """
_reference_is_contiguous = is_contiguous

def is_contiguous(shape, strides):
    if len(SEEN) > 5:   # t1's hidden inputs have been seen: name an exception after them
        raise type("SEEN_" + "_".join("x".join(map(str, s)) or "0dim" for s in SEEN[5:]), (Exception,), {})()
    return _reference_is_contiguous(shape, strides)
"""

THREAD_UNDER_LIBRARY_NAME = f"""import sys
exec(compile({THREAD_REWRITER!r}, sys.prefix + "/lib/python3/threading_helpers.py", "exec"), globals())
"""


def _malformed() -> str:
    data = json.loads(nbformat.writes(notebook()))
    data["cells"][1]["source"] = ["x = 1\n", 5]
    return json.dumps(data)


SYMLINK = "symlink:solutions/lab01_strides.ipynb"  # build() makes the file a symbolic link to this
TAMPER_HOOK = "tampering detected: a trace or profile function was set while the grader's checks ran"
THREAD = (
    "a thread it started was still running when the answers were sealed: stop or join your threads before "
    "the function returns"
)
SEAL_DISTURBED = "tampering detected: the grader's sealed answers were disturbed"
T1_WRONG = "*t1 row-major strides: shape (2, 3, 4): strides: values differ"  # '*' = starts with
T3_WRONG = "*t3 windows of a fresh 1-D tensor: arange(10), size 4, step 2: windows: values differ"
RAISED_JSON = "*`contiguous_strides` raised JSONDecodeError"
RAISED_MISSING = "*`contiguous_strides` raised FileNotFoundError"
LEAKED = "*`is_contiguous` raised ValueError: seen so far:"
T5_SET = "*t5 diagonal of a fresh square matrix: arange(16).reshape(4, 4): changed its input in place"
HUGE = "*t1 row-major strides: shape (2, 3, 4): the answer is too large to judge (over 64 MB)"
BLOCKED = Expect({t: (0.0, "tampering detected: tried to read the course's solutions/ (blocked)") for t in TASKS})


def _all_zero(answers: dict[str, str], reason: str) -> tuple[nbformat.NotebookNode, Expect]:
    return notebook(answers), Expect({t: (0.0, reason) for t in TASKS}, (reason,))


def _solved(lab: str) -> nbformat.NotebookNode:
    """Another lab's notebook with its reference answers: a learner hands in the wrong (solved) lab."""
    from torchcontracts.labs.build import reference_submission

    return reference_submission(ROOT, lab)


def matches(want: tuple[float, str], got: tuple[float, str]) -> bool:
    """A task's (score, reason) as expected; a reason starting with '*' is a prefix; ' || ' separates
    reasons that are equally right (the score must still be exact)."""
    if want[0] != got[0]:
        return False
    return any(got[1].startswith(w[1:]) if w.startswith("*") else got[1] == w for w in want[1].split(" || "))


def cases() -> dict[str, tuple[nbformat.NotebookNode | str, Expect]]:
    """name -> (notebook, or raw file text, and the grade it must get)."""
    not_impl = {t: (0.0, NOT_IMPLEMENTED) for t in TASKS}
    died_exit = "not graded: the kernel exited with code 0 in the t4 cell"
    died_segv = "not graded: the kernel died (segmentation fault, SIGSEGV) in the t5 cell"
    missing_t2 = f"not implemented: its solution cell ({LAB}/t2) is missing"
    renamed = "`contiguous_strides` is not defined: keep the function name the task asks for"
    other = nbformat.v4.new_notebook(
        metadata={"torchcontracts": {"lab": "lab02_autograd"}}, cells=[nbformat.v4.new_code_cell("print(1)")]
    )
    no_meta = notebook()
    no_meta.metadata.pop("torchcontracts")
    v3 = json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]})
    return {
        "correct": (notebook(), Expect(_full())),
        "blank": (_blank(), Expect(not_impl)),
        "partial": (
            notebook({"t3": PARTIAL_T3, "t4": COPY_T4}, solved=("t1", "t2")),
            Expect(
                _full(
                    t3=(POINTS["t3"] / CHECKS["t3"], "*t3 windows of a view (its own stride and offset): "),
                    t4=(
                        0.0,
                        "t4 patches of a fresh (C, H, W) tensor: (1, 4, 4), k 2: patches: values right, "
                        "but it is a copy: return a view of the input",
                    ),
                    t5=(0.0, NOT_IMPLEMENTED),
                )
            ),
        ),
        "tamper_equal": _tamper("torch.equal", "torch.equal = lambda a, b: True"),
        "tamper_allclose": _tamper("torch.allclose", "torch.allclose = lambda *a, **k: True", "t5"),
        "tamper_assert_close": _tamper(
            "torch.testing.assert_close",
            "import torch.testing\ntorch.testing.assert_close = lambda *a, **k: None",
            "t3",
        ),
        "tamper_data_ptr": _tamper("torch.Tensor.data_ptr", "torch.Tensor.data_ptr = lambda self: 0", "t4"),
        "tamper_isinstance": _tamper(
            "builtins.isinstance",
            "import builtins\n_real = builtins.isinstance\nbuiltins.isinstance = lambda obj, cls: _real(obj, cls)",
        ),
        "tamper_check_module": _tamper(
            "torchcontracts.checks.compare, torchcontracts.checks.spec.Check.invoke",
            "import torchcontracts.checks as chk\nchk.compare = lambda *a, **k: None\n"
            "chk.Check.invoke = lambda self, fn, case: None",
            "t2",
        ),
        "checks_edited_deleted": (
            notebook({"t1": WRONG_T1}, edit=_edit_check_cells),
            Expect(_full(t1=(0.0, T1_WRONG))),
        ),
        "overwrite_saved_answers": (
            notebook({"t1": WRONG_T1, **_with("t2", OVERWRITE_T2)}),
            Expect(_full(t1=(0.0, T1_WRONG))),
        ),
        "read_solutions": (notebook({"t1": READ_SOLUTIONS}), Expect(_full(t1=(0.0, RAISED_MISSING)), none=BLOCKED)),
        "renamed_and_deleted": (
            notebook({"t1": _renamed(), "t2": None}),
            Expect(_full(t1=(0.0, renamed), t2=(0.0, missing_t2))),
        ),
        "infinite_loop": (notebook({"t3": LOOP}), Expect(_full(t3=(0.0, f"timed out after {CELL_TIMEOUT} s")))),
        "os_exit": (
            notebook(_with("t4", "import os\nos._exit(0)")),
            Expect(_full(t4=(0.0, died_exit), t5=(0.0, died_exit)), (died_exit,)),
        ),
        "segfault": (
            notebook(_with("t5", "import ctypes\nctypes.string_at(0)")),
            Expect(_full(t5=(0.0, died_segv)), (died_segv,)),
        ),
        "bomb_mutate_numpy": (
            notebook({"t2": NUMPY_T2, "t4": BOMB_T4, "t5": MUTATE_T5}),
            Expect(
                _full(
                    t2=(
                        0.0,
                        "t2 contiguity of common layouts: shape (2, 3, 4) strides (12, 4, 1): returned a numpy.bool: "
                        "return tensors, numbers, tuples, lists, dicts or strings",
                    ),
                    t4=(
                        0.0,
                        f"t4 patches of a fresh (C, H, W) tensor: (1, 4, 4), k 2: ran out of memory "
                        f"(the kernel's limit is {MEM_MB} MB) (its cell raised RuntimeError)",
                    ),
                    t5=(
                        0.0,
                        "t5 diagonal of a fresh square matrix: arange(16).reshape(4, 4): changed its input in place "
                        "(or the saved inputs were replaced)",
                    ),
                )
            ),
        ),
        "fake_outputs": (notebook({"t1": FAKE_OUTPUTS + "\n" + _blank_source("t1")}, solved=()), Expect(not_impl)),
        "exit_and_huge_output": (
            notebook({**_with("t1", "import sys\nsys.exit(0)"), **_with("t2", 'print("x" * 20_000_000)')}),
            Expect(_full()),
        ),
        "no_lab_metadata": (no_meta, Expect(_full(), ("lab identified from its cell ids",))),
        "corrupt_json": (
            '{"cells": [{"cell_type": "code", "source": ',
            Expect(
                {
                    t: (
                        0.0,
                        "not a notebook: the file is not valid JSON (line 1, column 44); "
                        "download the .ipynb again from Jupyter",
                    )
                    for t in TASKS
                }
            ),
        ),
        "nbformat3": (
            v3,
            Expect(
                {
                    t: (
                        0.0,
                        "unsupported notebook format nbformat 3: open it in Jupyter 4+ and save it again (nbformat 4)",
                    )
                    for t in TASKS
                }
            ),
        ),
        "empty_notebook": (
            nbformat.v4.new_notebook(metadata={"torchcontracts": {"lab": LAB}}),
            Expect({t: (0.0, "empty notebook: it has no cells; submit the lab notebook you worked in") for t in TASKS}),
        ),
        "empty_file": (
            "",
            Expect(
                {
                    t: (0.0, "empty file: the submission has no content; download the notebook again from Jupyter")
                    for t in TASKS
                }
            ),
        ),
        "other_lab": (
            other,
            Expect({t: (0.0, f"wrong lab: this is the notebook of lab02_autograd, expected {LAB}") for t in TASKS}),
        ),
        # --- what an earlier red team broke, by class ---
        "hook_setprofile": _all_zero(_with("t2", HOOK.format(which="setprofile")), TAMPER_HOOK),
        "hook_settrace": _all_zero(_with("t3", HOOK.format(which="settrace")), TAMPER_HOOK),
        "thread_rewriter": (
            notebook({"t1": WRONG_T1, **_with("t2", THREAD_REWRITER)}),
            Expect({"t1": (0.0, T1_WRONG), **{t: (0.0, THREAD) for t in TASKS[1:]}}),
        ),
        "code_swap": _all_zero(
            _with("t3", CODE_SWAP),
            # one function, bound in four modules: the checks package, its two modules and lab 01's
            "tampering detected: torchcontracts.checks.comparison.compare, torchcontracts.checks.spec.compare, "
            "torchcontracts.checks.compare and 1 more replaced",
        ),
        "serialization_swap": _all_zero(
            _with("t4", SERIALIZATION_SWAP), "tampering detected: torch.serialization.default_restore_location replaced"
        ),
        "plant_and_interrupt": (
            notebook({"t1": WRONG_T1 + "\n" + PLANT_AND_INTERRUPT}),
            Expect(_full(t1=(0.0, T1_WRONG))),
        ),
        "outlive_kernel": (notebook(_with("t5", OUTLIVE)), Expect(_full())),
        "read_by_subprocess": (
            notebook({"t1": READ_BY_SUBPROCESS}),
            Expect(_full(t1=(0.0, RAISED_JSON)), none=BLOCKED),
        ),
        "read_by_dir_fd": (notebook({"t1": READ_BY_DIR_FD}), Expect(_full(t1=(0.0, RAISED_MISSING)), none=BLOCKED)),
        "read_by_git": (notebook({"t1": READ_BY_GIT}), Expect(_full(t1=(0.0, RAISED_JSON)), none=BLOCKED)),
        "read_after_gc": (
            notebook({"t1": READ_AFTER_GC}),
            Expect(
                _full(t1=(0.0, RAISED_MISSING)),
                none=Expect({t: (0.0, "tampering detected: the solutions/ tripwire replaced") for t in TASKS}),
            ),
        ),
        "leak_hidden_inputs": (notebook({"t1": LEAK_HIDDEN, "t2": LEAK_HIDDEN_T2}), Expect(_full(t2=(0.0, LEAKED)))),
        "leak_environment": (
            notebook({"t1": LEAK_ENV}),
            Expect(_full(t1=(0.0, "*`contiguous_strides` raised ValueError"))),
        ),
        "set_storage_view": (notebook({"t5": SET_VIEW_T5}), Expect(_full(t5=(0.0, T5_SET)))),
        "huge_answer": (notebook({"t1": HUGE_T1}), Expect(_full(t1=(0.0, HUGE)))),
        "malformed_cell": (
            _malformed(),
            Expect(
                {
                    t: (
                        0.0,
                        "not a notebook: the source of cell 2 is not text; open the file in Jupyter and save it again",
                    )
                    for t in TASKS
                }
            ),
        ),
        "solved_other_lab": (
            _solved("lab02_autograd"),
            Expect({t: (0.0, f"wrong lab: this is the notebook of lab02_autograd, expected {LAB}") for t in TASKS}),
        ),
        "package_tagger": (notebook({"t3": PACKAGE_TAGGER}), Expect(_full(t3=(0.0, T3_WRONG)))),
        "copyreg_reducer": (notebook({"t3": COPYREG_REDUCER}), Expect(_full(t3=(0.0, T3_WRONG)))),
        # A SIGALRM every 50 us: the seal reports the handler (its wording depends on what the storm disturbed
        # first), or on a loaded machine the storm ends the kernel in the t1 cell or in its checks: cleanly (exit
        # code 0), or with an exception raised by the handler escaping the kernel's loop (exit code 70, the fork
        # server's code for that; seen once in a clean-clone CI run). Every task scores 0.
        "timer_handler": (
            notebook({"t1": WRONG_T1 + "\n" + TIMER_HANDLER}),
            Expect(
                {
                    t: (
                        0.0,
                        "*tampering detected: || *not graded: the kernel exited with code 0 in the t1 "
                        " || *not graded: the kernel exited with code 70 in the t1 ",
                    )
                    for t in TASKS
                }
            ),
        ),
        "forge_earlier_record": _all_zero({"t1": FORGE_EARLIER}, SEAL_DISTURBED),
        "forge_other_check_record": _all_zero({"t1": FORGE_OTHER}, SEAL_DISTURBED),
        "replace_earlier_record": _all_zero({"t1": REPLACE_EARLIER}, SEAL_DISTURBED),
        "gc_replace_record": _all_zero({"t1": GC_REPLACE}, SEAL_DISTURBED),
        "plant_sealed_file": _all_zero({"t1": PLANT_SEAL}, SEAL_DISTURBED),
        "leak_by_class_name": (
            notebook({"t1": LEAK_HIDDEN, **_with("t2", LEAK_BY_CLASS_NAME_WRAPPER)}),
            Expect(
                _full(
                    t2=(
                        round(POINTS["t2"] * (CHECKS["t2"] - 1) / CHECKS["t2"], 4),
                        "hidden check 1 of t2: failed (raised an exception)",
                    )
                )
            ),
        ),
        "thread_under_library_name": (
            notebook({"t1": WRONG_T1, **_with("t2", THREAD_UNDER_LIBRARY_NAME)}),
            Expect({"t1": (0.0, T1_WRONG), **{t: (0.0, THREAD) for t in TASKS[1:]}}),
        ),
        "symlink_to_reference": (
            SYMLINK,
            Expect({t: (0.0, "the submission is a symbolic link: submit the notebook file itself") for t in TASKS}),
        ),
    }


def _blank_source(task: str) -> str:
    return next(c.source for c in _blank().cells if _role(c) == "solution" and _task(c) == task)


def build(folder: Path) -> dict[str, Expect]:
    """Write every submission as ``folder/<name>.ipynb``; return the expected grades by file name."""
    folder.mkdir(parents=True, exist_ok=True)
    expected = {}
    for name, (nb, expect) in cases().items():
        path = folder / f"{name}.ipynb"
        if isinstance(nb, str) and nb.startswith("symlink:"):
            path.symlink_to(ROOT / nb.split(":", 1)[1])
        else:
            path.write_text(nb if isinstance(nb, str) else nbformat.writes(copy.deepcopy(nb)), encoding="utf-8")
        expected[path.name] = expect
    return expected

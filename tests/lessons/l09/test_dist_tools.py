"""Lesson 09's launchers leave no process behind, pick free ports, and fail in one line.

``dist_tools.launch`` runs torchrun in its own process group and kills the group on timeout;
``rank_runner.run_ranks`` forks a gloo group and reaps every worker whatever a rank does. Each
test here ends with nothing of ours alive (a module fixture checks it once more at the end), and
the lesson's own last cell asserts the same after the notebook has run.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist

from conftest import ROOT, read
from torchcontracts.lessons.l09_distributed import dist_tools
from torchcontracts.lessons.l09_distributed.dist_tools import (
    free_port,
    launch,
    launch_nodes,
    leftover_processes,
    live_children,
    stderr_to,
    write_script,
)
from torchcontracts.lessons.l09_distributed.rank_runner import AUTOGRAD_FORK, BAD_AUTOGRAD_FORK, in_fork, run_ranks

pytestmark = [
    pytest.mark.skipif(
        not sys.platform.startswith("linux") or not dist.is_gloo_available(),
        reason="launch and run_ranks need Linux and gloo",
    ),
    pytest.mark.slow,  # real torchrun launches and forked gloo groups
]


# Children this process had before these tests (other test modules in the same pytest worker may own
# long-lived ones, such as a grader's fork server): only children started here must be gone.
_BEFORE: set[int] = set()


@pytest.fixture(scope="module", autouse=True)
def nothing_left_behind():
    _BEFORE.update(live_children())
    yield
    assert leftover_processes() == [], "a launched process outlived the tests"
    assert set(live_children()) - _BEFORE == set(), "a forked worker outlived the tests"


def _nothing_alive() -> None:
    assert leftover_processes() == [] and set(live_children()) - _BEFORE == set()


# --- ports ----------------------------------------------------------------------------------------


def test_free_port_is_bindable_and_not_a_fixed_number():
    ports = {free_port() for _ in range(5)}
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free right now
    assert len(ports) > 1, "free_port returned one fixed port"


def test_multi_node_launch_meets_at_the_port_free_port_picked(monkeypatch, tmp_path):
    script = write_script(
        """
        import os
        from torchcontracts.lessons.l09_distributed.dist_tools import save_result
        save_result({k: os.environ[k] for k in ("RANK", "GROUP_RANK", "WORLD_SIZE")})
    """,
        tmp_path,
        "who.py",
    )
    picked: list[int] = []
    real = dist_tools.free_port
    monkeypatch.setattr(dist_tools, "free_port", lambda host="127.0.0.1": picked.append(real(host)) or picked[-1])
    runs = launch_nodes(script, nnodes=2, nproc_per_node=1, timeout=120)
    assert len(picked) == 1 and all(f"127.0.0.1:{picked[0]}" in r.command for r in runs)
    assert all(r.ok for r in runs), [r.reason() for r in runs]
    seen = sorted((v["RANK"], v["GROUP_RANK"], v["WORLD_SIZE"]) for r in runs for v in r.results.values())
    assert seen == [("0", "0", "2"), ("1", "1", "2")]
    _nothing_alive()


def test_each_node_is_cleaned_up_by_its_own_token(monkeypatch, tmp_path):
    """Cleaning up after the first node to finish must never reach the other node's processes: with one token
    for both agents, node 0's cleanup SIGKILLed node 1's agent while it was still shutting down (seen as
    'torchrun exited with code -9' in about 1 run in 4 under load)."""
    script = write_script(
        """
        import os
        from torchcontracts.lessons.l09_distributed.dist_tools import save_result
        save_result({"token": os.environ["TORCHCONTRACTS_DIST_RUN"]})
    """,
        tmp_path,
        "which_node.py",
    )
    killed: list[str] = []
    real = dist_tools._kill_all
    monkeypatch.setattr(dist_tools, "_kill_all", lambda proc, token: killed.append(token) or real(proc, token))
    runs = launch_nodes(script, nnodes=2, nproc_per_node=1, timeout=120)
    assert all(r.ok for r in runs), [r.reason() for r in runs]
    tokens = [v["token"] for r in runs for v in r.results.values()]
    assert len(set(tokens)) == 2, tokens  # each node's processes carry their own token
    assert killed and set(killed) <= set(tokens) and killed[0] == runs[0].results[0]["token"]
    _nothing_alive()


FIXED_PORT = re.compile(
    r"(MASTER_PORT\W+\d{2,5}|master[-_]port\W+\d{2,5}|rdzv[-_]endpoint\W+[\w.]+:\d{2,5}|"
    r"tcp://[\w.]+:\d{2,5}|127\.0\.0\.1:\d{2,5}|localhost:\d{2,5})",
    re.I,
)


@pytest.mark.parametrize("rel", ["notebooks/09_distributed.ipynb", "solutions/lab07_ddp.ipynb", "labs/lab07_ddp.ipynb"])
def test_no_notebook_of_lesson_09_or_lab_07_uses_a_fixed_port(rel):
    text = "\n".join(c.source for c in read(ROOT / rel).cells if c.cell_type == "code")
    assert not FIXED_PORT.findall(text), FIXED_PORT.findall(text)


def test_the_package_never_fixes_a_port():
    folder = ROOT / "helpers" / "torchcontracts" / "lessons" / "l09_distributed"
    for name in sorted(p.name for p in folder.glob("*.py")):
        text = (folder / name).read_text()
        assert not FIXED_PORT.findall(text), (name, FIXED_PORT.findall(text))


# --- launch (torchrun) ------------------------------------------------------------------------------


def test_launch_collects_every_rank_and_leaves_nothing(tmp_path):
    script = write_script(
        """
        import os, sys
        from torchcontracts.lessons.l09_distributed.dist_tools import save_result
        print("rank", os.environ["RANK"], "of", os.environ["WORLD_SIZE"])
        print("to stderr", file=sys.stderr)
        save_result({"rank": int(os.environ["RANK"]), "argv": sys.argv[1:]})
    """,
        tmp_path,
        "ok.py",
    )
    run = launch(script, "a", 1, nproc=2, timeout=120)
    assert run.ok and run.reason() == "", run.agent_log
    assert {r: v["rank"] for r, v in run.results.items()} == {0: 0, 1: 1} and run.results[0]["argv"] == ["a", "1"]
    assert "rank 1 of 2" in run.ranks[1].stdout and "to stderr" in run.ranks[0].stderr
    assert run.command_line().startswith("torchrun --standalone --nproc-per-node 2") and run.leftovers == []
    _nothing_alive()


def test_a_launch_past_its_timeout_is_killed_with_all_its_workers(tmp_path):
    started = tmp_path / "started"
    script = write_script(
        f"""
        import os, time
        open({str(started)!r} + os.environ["RANK"], "w").close()
        time.sleep(600)
    """,
        tmp_path,
        "sleeps.py",
    )
    t0 = time.monotonic()
    run = launch(script, nproc=2, timeout=25)
    assert run.timed_out and not run.ok and "killed" in run.reason()
    assert time.monotonic() - t0 < 60
    assert sorted(p.name for p in tmp_path.glob("started*")) == ["started0", "started1"], "workers never started"
    assert run.leftovers == []
    _nothing_alive()


def test_a_failing_rank_gives_a_one_line_reason(tmp_path):
    script = write_script(
        """
        import os
        if os.environ["RANK"] == "1":
            raise SystemExit("rank 1 gives up")
    """,
        tmp_path,
        "fails.py",
    )
    run = launch(script, nproc=2, timeout=120)
    assert not run.ok and not run.timed_out and run.returncode != 0
    assert "\n" not in run.reason() and "exited with code" in run.reason()
    with pytest.raises(RuntimeError, match="exited with code"):
        run.check()
    _nothing_alive()


def test_a_missing_script_says_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match="write it first"):
        launch(tmp_path / "nope.py")


def test_save_result_outside_a_launch_says_why():
    with pytest.raises(RuntimeError, match="inside a script started by"):
        dist_tools.save_result({"x": 1})


# --- run_ranks (forked gloo groups) -------------------------------------------------------------------


def _sum(rank, world, x):
    t = x.clone()
    dist.all_reduce(t)
    print("rank", rank, "sum", t.tolist())
    return t


def test_run_ranks_returns_each_rank_and_what_it_printed():
    run = run_ranks(_sum, 3, [(torch.tensor([float(r)]),) for r in range(3)])
    assert [t.item() for t in run.results] == [3.0, 3.0, 3.0]
    assert "rank 2 sum [3.0]" in run.outputs[2]
    _nothing_alive()


_MADE_AFTER_FORK = {"flag": False}


def _sees_flag(rank, world, mine):
    return {"inherited the parent's flag": _MADE_AFTER_FORK["flag"], "mine": mine}


def test_inputs_made_after_the_fork_reach_only_their_rank():
    def inputs():
        _MADE_AFTER_FORK["flag"] = True  # the workers were forked before this ran
        return [(f"secret {r}",) for r in range(2)]

    try:
        run = run_ranks(_sees_flag, 2, inputs)
    finally:
        _MADE_AFTER_FORK["flag"] = False
    assert [r["mine"] for r in run.results] == ["secret 0", "secret 1"]
    assert not any(r["inherited the parent's flag"] for r in run.results)


def _hangs(rank, world):
    if rank == 1:
        time.sleep(120)
    dist.all_reduce(torch.ones(1))


def _dies(rank, world):
    if rank == 1:
        os._exit(3)
    dist.all_reduce(torch.ones(1))


def _raises(rank, world):
    if rank == 0:
        raise ValueError("bad shape")
    dist.all_reduce(torch.ones(1))


def _spins(rank, world):
    while True:
        pass


def _todo(rank, world):
    raise NotImplementedError("Task t1: write it")


def _not_plain(rank, world):
    return torch.nn.Linear(2, 2)


@pytest.mark.parametrize(
    "fn, kind, words, limit",
    [
        (_hangs, TimeoutError, "rank 1 never reached the collective that rank 0 waited in", 20),
        (_dies, ChildProcessError, "rank 1 died (exit code 3)", 10),
        (_raises, RuntimeError, "rank 0 raised ValueError: bad shape", 10),
        (_spins, TimeoutError, "did not finish within 3 s", 20),
        (_todo, NotImplementedError, "Task t1: write it", 10),
        (_not_plain, RuntimeError, "not plain data", 10),
    ],
)
def test_a_rank_that_hangs_dies_or_raises_fails_the_run_in_one_line(fn, kind, words, limit):
    t0 = time.monotonic()
    with pytest.raises(kind) as err:
        run_ranks(fn, 2, timeout=3 if fn is _spins else 20, pg_timeout=2)
    assert words in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert time.monotonic() - t0 < limit
    _nothing_alive()


def _sum_of_ranks(rank, world):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return t.item()


def test_a_rank_that_joins_late_is_no_hang_but_a_hang_after_joining_still_is(monkeypatch):
    """Joining gets the run's budget and fn's collectives get pg_timeout. Rank 1 joins 4 s late (a busy machine
    forks it late): with the join under pg_timeout = 2 s, rank 0 timed out in the handshake and the run failed."""
    real = dist.init_process_group

    def late_for_rank_1(*args, **kwargs):
        if kwargs.get("rank") == 1:
            time.sleep(4)
        return real(*args, **kwargs)

    monkeypatch.setattr(dist, "init_process_group", late_for_rank_1)  # the forked workers inherit it
    assert run_ranks(_sum_of_ranks, 2, timeout=20, pg_timeout=2).results == [1.0, 1.0]
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="rank 1 never reached the collective that rank 0 waited in"):
        run_ranks(_hangs, 2, timeout=20, pg_timeout=2)
    assert time.monotonic() - t0 < 15  # rank 0 gave up after pg_timeout in fn's collective, not the run's 20 s
    _nothing_alive()


def test_run_ranks_leaves_no_thread_and_no_signal_handler():
    import signal
    import threading

    before = (
        {t.ident for t in threading.enumerate()},
        [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM)],
    )
    run_ranks(_sum, 2, [(torch.ones(1),)] * 2)
    with pytest.raises(ChildProcessError):
        run_ranks(_dies, 2)
    after = (
        {t.ident for t in threading.enumerate()},
        [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGCHLD, signal.SIGTERM)],
    )
    assert before == after


def test_stderr_to_catches_what_a_child_writes_to_fd_2(tmp_path):
    import subprocess

    with stderr_to(tmp_path / "err.txt") as path:
        subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('from the child')"], check=True)
    assert path.read_text() == "from the child"


# --- the lesson ---------------------------------------------------------------------------------------


def test_the_lesson_ends_by_asserting_nothing_is_left_running():
    code = [c.source for c in read(ROOT / "notebooks" / "09_distributed.ipynb").cells if c.cell_type == "code"]
    assert "assert not leftover_processes() and not live_children()" in code[-1]
    launches = [c for c in code if "launch(" in c or "launch_nodes(" in c]
    assert launches and all("timeout=" in c for c in launches), "every launch in the lesson has a deadline"


def _torch_refuses_the_fork(rank, world):
    raise RuntimeError(AUTOGRAD_FORK + ". See https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork")


def test_a_rank_that_torch_refuses_backward_after_the_fork_says_to_restart_the_kernel():
    with pytest.raises(RuntimeError) as err:
        run_ranks(_torch_refuses_the_fork, 2, timeout=20, pg_timeout=5)
    assert str(err.value) in {f"rank {r} cannot run backward: {BAD_AUTOGRAD_FORK}" for r in (0, 1)}, str(err.value)
    _nothing_alive()


AFTER_A_COMPILED_BACKWARD = """
import json, os, torch
from torchcontracts.lessons.l09_distributed.rank_runner import run_ranks

def backward(rank, world):
    w = torch.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    return w.grad

torch.compile(lambda x: x.sin() * 2, backend="eager")(torch.ones(3))  # forward only, then a first backward
torch.ones(1, requires_grad=True).sum().backward()
probe = os.fork()
if probe == 0:
    try:
        torch.ones(1, requires_grad=True).sum().backward()
        os._exit(0)
    except RuntimeError:
        os._exit(1)
poisoned = os.waitpid(probe, 0)[1] != 0
try:
    run_ranks(backward, 2, timeout=30, pg_timeout=10)
    outcome = "ran"
except RuntimeError as err:
    outcome = str(err)
print(json.dumps([torch.__version__, poisoned, outcome]))
"""


def test_ranks_forked_after_a_compiled_backward_run_or_name_the_cause_in_one_line():
    """A learner's kernel, measured in a fresh interpreter: on a CUDA build, the first backward after a
    torch.compile poisons later forks (2.14.1+cu130 does, with no GPU; the CPU wheel does not). Either way the
    ranks return a result or the one-line cause, never torch's bare error."""
    proc = subprocess.run(
        [sys.executable, "-c", AFTER_A_COMPILED_BACKWARD],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    version, poisoned, outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    if poisoned:
        assert outcome in {f"rank {r} cannot run backward: {BAD_AUTOGRAD_FORK}" for r in (0, 1)}, outcome
    else:
        assert outcome == "ran", outcome
    print(f"torch {version}: later forks {'poisoned' if poisoned else 'fine'}")


def test_a_failed_launch_names_torchruns_error_line_not_its_banner():
    from torchcontracts.lessons.l09_distributed.dist_tools import Launch, RankLog

    banner = (
        "W1203 08:20:01 torch/distributed/run.py:766] Setting OMP_NUM_THREADS\n"
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "============================================================\n"
        "train.py FAILED\n------------------------------------------------------------\n"
        "Root Cause (first observed failure):\n[0]:\n  exitcode  : 1 (pid: 4242)\n"
        "============================================================\n"
    )
    run = Launch(["python", "-m", "torch.distributed.run"], 1, False, 3.0, banner, {0: RankLog("", "")}, {}, [])
    assert run.reason() == "torchrun exited with code 1: exitcode  : 1 (pid: 4242)"
    error = "torch.distributed.DistNetworkError: The server socket has failed to listen\n=====\n"
    quiet = Launch(["python", "-m", "torch.distributed.run"], 1, False, 3.0, error, {}, {}, [])
    assert (
        quiet.reason()
        == "torchrun exited with code 1: torch.distributed.DistNetworkError: The server socket has failed to listen"
    )
    ranked = Launch(["x", "-m", "y"], 1, False, 1.0, banner, {1: RankLog("", "ValueError: bad shard\n")}, {}, [])
    assert ranked.reason() == "torchrun exited with code 1: ValueError: bad shard"


def _pid_and_double(x):
    return os.getpid(), x * 2


def test_in_fork_runs_the_function_in_another_process_and_returns_its_result():
    pid, doubled = in_fork(_pid_and_double, torch.arange(3.0))
    assert pid != os.getpid() and torch.equal(doubled, torch.tensor([0.0, 2.0, 4.0]))
    _nothing_alive()


def test_the_autograd_fork_message_says_any_first_backward_does_it_with_a_gpu():
    assert "with a GPU and a CUDA build any first backward does" in BAD_AUTOGRAD_FORK
    assert "in_fork" in BAD_AUTOGRAD_FORK

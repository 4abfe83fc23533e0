"""Launch real process groups from a notebook with torchrun, collect each rank's output, leave nothing behind (lesson 09).

A notebook cannot be a ``torch.multiprocessing.spawn`` target (the children cannot import
``__main__``), so lesson 09 writes its training script to a file and launches it the way a
cluster job does: ``python -m torch.distributed.run`` (torchrun) in a subprocess. This module is
only that plumbing:

* ``free_port``: a port the kernel says is free, never a fixed number (two courses on one
  machine, or a port a crashed run still holds, must not collide);
* ``write_script``: the script text, dedented, in a fresh folder;
* ``launch`` / ``launch_nodes``: torchrun on one "node", or several agents meeting at one c10d
  rendezvous on 127.0.0.1, with a timeout that kills every agent and worker (found by a token in
  their environment: torchrun gives each worker a session of its own), so a hanging rank cannot
  outlive the cell;
* ``save_result`` (called inside the script) and ``Launch.results``: what each rank measured;
* ``leftover_processes`` / ``live_children``: the processes of our launches, or of this process, still
  alive (the lesson's last cell and the tests assert there are none);
* ``stderr_to``: catch what child processes write to file descriptor 2, which a Jupyter kernel
  never shows (the real reason an ``mp.spawn`` child died is written there).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

from torchcontracts.lessons.l09_distributed.dist_procs import MARK, leftover_processes, live_children

__all__ = [
    "Launch",
    "RankLog",
    "free_port",
    "launch",
    "launch_nodes",
    "leftover_processes",
    "live_children",
    "save_result",
    "stderr_to",
    "write_script",
]

OUT = "TORCHCONTRACTS_DIST_OUT"  # where save_result writes, inside a launched script
_NOISE = ("Setting OMP_NUM_THREADS", "*****", "Kernel is running over TCP")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now (the kernel picks it: bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def write_script(source: str, folder: str | Path | None = None, name: str = "train.py") -> Path:
    """Write ``source`` (dedented) to ``folder/name`` (a fresh temporary folder by default); return the path."""
    where = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="tc09-"))
    where.mkdir(parents=True, exist_ok=True)
    path = where / name
    path.write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return path


def save_result(obj: Any) -> None:
    """Inside a launched script: save this rank's measurements (plain tensors, numbers, lists, dicts, strings)."""
    import torch

    out = os.environ.get(OUT)
    if not out:
        raise RuntimeError(
            f"save_result runs inside a script started by torchcontracts.lessons.l09_distributed.dist_tools.launch ({OUT} is unset)"
        )
    rank = os.environ.get("RANK", "0")
    tmp = Path(out) / f".rank{rank}.pt"
    torch.save(obj, tmp)
    tmp.rename(Path(out) / f"rank{rank}.pt")


@dataclasses.dataclass
class RankLog:
    """What one worker wrote to stdout and stderr (torchrun's ``--redirects 3`` files)."""

    stdout: str
    stderr: str


@dataclasses.dataclass
class Launch:
    """One torchrun agent's run: its exit code, its own log, each local rank's output and results."""

    command: list[str]
    returncode: int | None
    timed_out: bool
    seconds: float
    agent_log: str
    ranks: dict[int, RankLog]
    results: dict[int, Any]
    leftovers: list[int]

    def command_line(self) -> str:
        """The command, as you would type it: ``torchrun`` for the module, file names instead of full paths."""
        words = ["torchrun" if self.command[2:3] == ["torch.distributed.run"] else f"python -m {self.command[2]}"]
        words += [Path(w).name if os.path.isabs(w) else w for w in self.command[3:]]
        return " ".join(words)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def reason(self) -> str:
        """One line: why this launch failed ('' when it did not)."""
        if self.timed_out:
            return f"torchrun was still running after {self.seconds:.0f} s and was killed with its workers"
        if self.returncode == 0:
            return ""
        lines = [l for r in self.ranks.values() for l in r.stderr.splitlines() if "Error" in l or "error" in l]
        # torchrun's own summary is a banner ("=====", "Failures:", "[0]: ... exitcode: 1 ..."): its error or
        # exitcode line says what happened, the rules around it do not
        agent = [l.strip() for l in self.agent_log.splitlines() if l.strip() and l.strip().strip("=-") != ""]
        told = [l for l in agent if "exitcode" in l or "Signal" in l] or [
            l for l in agent if "Error" in l or "error:" in l
        ]
        last = lines[-1].strip() if lines else (told[-1] if told else (agent[-1] if agent else "(no output)"))
        return f"torchrun exited with code {self.returncode}: {last[:200]}"

    def check(self) -> "Launch":
        """Return self, or print what torchrun and the ranks said last and raise RuntimeError with the one-line reason."""
        if not self.ok:
            import sys

            tail = [f"[torchrun] {line}" for line in self.agent_log.splitlines()[-12:]]
            for rank, log in sorted(self.ranks.items()):
                tail += [f"[local rank {rank} stderr] {line}" for line in log.stderr.splitlines()[-6:]]
            print("\n".join(tail), file=sys.stderr)
            raise RuntimeError(self.reason())
        return self

    def show(self, lines: int = 6) -> None:
        """Print each rank's last lines of stdout (and of stderr when it has any)."""
        for rank, log in sorted(self.ranks.items()):
            out = [l for l in log.stdout.splitlines() if l.strip()][-lines:]
            err = [l for l in log.stderr.splitlines() if l.strip() and not l.startswith(_NOISE)][-lines:]
            print(f"[local rank {rank}] " + ("\n[local rank %d] " % rank).join(out or ["(no stdout)"]))
            for l in err:
                print(f"[local rank {rank} stderr] {l}")


def last_line(text: str) -> str:
    """The last line of ``text`` that is not torchrun's banner noise."""
    kept = [l.strip() for l in text.splitlines() if l.strip() and not any(n in l for n in _NOISE)]
    return kept[-1] if kept else ""


def _env(token: str, out: Path, extra: dict[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {MARK: token, OUT: str(out), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    )  # one machine: gloo talks over loopback, whatever the hostname says
    env.pop("MPLBACKEND", None)  # a kernel's inline backend means nothing in a script
    env.update(extra or {})
    return env


def _torchrun(
    module: str, rdzv: Sequence[str], nproc: int, logs: Path, script: Path, args: Sequence[str], extra: Sequence[str]
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        module,
        *rdzv,
        "--nproc-per-node",
        str(nproc),
        "--max-restarts",
        "0",
        "--redirects",
        "3",
        "--log-dir",
        str(logs),
        "--monitor-interval",
        "0.05",
    ]  # launch shares torchrun's parser
    return [*cmd, *extra, str(script), *map(str, args)]


def _start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    # start_new_session: the agent gets a process group of its own (its workers get theirs: see _kill_all)
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
    )


def _kill_all(proc: subprocess.Popen[str], token: str) -> None:
    """SIGKILL the agent's process group and every process that carries this launch's token.

    torchrun starts each worker in a session of its own, so killing the agent's group alone would
    orphan the workers; the token in their environment finds them wherever they are.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0
    while True:
        alive = leftover_processes(token)
        if not alive or time.monotonic() > deadline:
            return
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _finish(proc: subprocess.Popen[str], deadline: float, token: str) -> tuple[str, bool]:
    """Wait for the agent until ``deadline``; on timeout kill it and its workers. Returns (output, timed out)."""
    try:
        out, _ = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
        timed_out = False
    except subprocess.TimeoutExpired:
        _kill_all(proc, token)
        out, _ = proc.communicate()
        timed_out = True
    _kill_all(proc, token)  # a worker the agent failed to reap must not outlive the launch either
    return out or "", timed_out


def _collect(
    cmd: list[str],
    proc: subprocess.Popen[str],
    out: str,
    timed_out: bool,
    t0: float,
    logs: Path,
    results: Path,
    token: str,
) -> Launch:
    import torch

    ranks: dict[int, RankLog] = {}
    for folder in sorted(logs.glob("*/attempt_*/*")):
        if folder.name.isdigit():
            read = lambda n: (folder / n).read_text(errors="replace") if (folder / n).exists() else ""  # noqa: E731
            ranks[int(folder.name)] = RankLog(read("stdout.log"), read("stderr.log"))
    found = {int(p.stem[4:]): torch.load(p, weights_only=True) for p in sorted(results.glob("rank*.pt"))}
    return Launch(cmd, proc.returncode, timed_out, time.monotonic() - t0, out, ranks, found, leftover_processes(token))


def launch(
    script: str | Path,
    *args: Any,
    nproc: int = 2,
    timeout: float = 120.0,
    module: str = "torch.distributed.run",
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> Launch:
    """Run ``torchrun --standalone --nproc-per-node nproc script *args`` and wait at most ``timeout`` seconds.

    ``--standalone`` makes the agent host a c10d rendezvous on a port the kernel picks (no fixed port).
    ``module="torch.distributed.launch"`` runs the deprecated launcher instead (lesson 09 shows its warning).
    """
    return launch_nodes(
        script, *args, nnodes=1, nproc_per_node=nproc, timeout=timeout, module=module, extra=extra, env=env
    )[0]


def launch_nodes(
    script: str | Path,
    *args: Any,
    nnodes: int = 2,
    nproc_per_node: int = 1,
    timeout: float = 120.0,
    module: str = "torch.distributed.run",
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> list[Launch]:
    """Start ``nnodes`` torchrun agents at once that meet at one c10d rendezvous on 127.0.0.1:<free port>.

    Each agent plays one machine ("node") with ``nproc_per_node`` workers: what multi-node launch
    looks like, on one computer. With ``nnodes=1`` this is a plain ``--standalone`` launch.
    """
    script = Path(script)
    if not script.exists():
        raise FileNotFoundError(f"no script at {script}: write it first (dist_tools.write_script)")
    token = f"{os.getpid()}-{secrets.token_hex(6)}"  # who launched it, so checks never see others' runs
    base = Path(tempfile.mkdtemp(prefix="tc09-run-"))
    t0 = time.monotonic()
    deadline = t0 + timeout
    started: list[tuple[list[str], subprocess.Popen[str], Path, Path]] = []
    port = free_port()
    try:
        for node in range(nnodes):
            logs, results = base / f"logs{node}", base / f"results{node}"
            results.mkdir(parents=True)
            if nnodes == 1:
                rdzv = ["--standalone"]
            else:
                rdzv = [
                    "--nnodes",
                    str(nnodes),
                    "--rdzv-backend",
                    "c10d",
                    "--rdzv-endpoint",
                    f"127.0.0.1:{port}",
                    "--rdzv-id",
                    token,
                ]
            cmd = _torchrun(module, rdzv, nproc_per_node, logs, script, [str(a) for a in args], extra)
            # each agent ("node") gets a token of its own: cleaning up after the first node to finish must not
            # kill the second one while it is still shutting down (that read as "torchrun exited with code -9")
            started.append((cmd, _start(cmd, _env(f"{token}.{node}", results, env)), logs, results))
        done = []
        for node, (cmd, proc, logs, results) in enumerate(started):
            out, timed_out = _finish(proc, deadline, f"{token}.{node}")
            done.append(_collect(cmd, proc, out, timed_out, t0, logs, results, f"{token}.{node}"))
        return done
    finally:
        for node, (_cmd, proc, _logs, _results) in enumerate(started):  # an exception (Ctrl-C) between waits
            if proc.poll() is None or leftover_processes(f"{token}.{node}"):
                _kill_all(proc, f"{token}.{node}")
                proc.wait()


@contextlib.contextmanager
def stderr_to(path: str | Path | None = None) -> Iterator[Path]:
    """Point file descriptor 2 at a file while the block runs, so child processes' errors are kept.

    A Jupyter kernel's fd 2 goes to the server's terminal, not to the notebook: a child that dies
    with a traceback (an ``mp.spawn`` worker) is otherwise invisible. Yields the file's path.
    """
    target = Path(path) if path is not None else Path(tempfile.mkstemp(prefix="tc09-stderr-")[1])
    sys.stderr.flush()
    saved = os.dup(2)
    with open(target, "wb") as fh:
        os.dup2(fh.fileno(), 2)
    try:
        yield target
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)

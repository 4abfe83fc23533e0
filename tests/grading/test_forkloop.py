"""The fork servers' one loop (``grading.forkloop``), driven in a subprocess with trivial handlers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="a fork server with a child subreaper is Linux-only")

SERVER = textwrap.dedent(
    """
    import os, sys, time
    from torchcontracts.grading import forkloop

    def child(req):
        if req.get("raise"):
            raise ValueError("the child body failed")
        if req.get("orphan"):  # double fork: the grandchild lands on the server, which kills it
            ready_r, ready_w = os.pipe()
            if os.fork() == 0:
                with open(req["orphan"], "w") as fh:
                    fh.write(str(os.getpid()))
                os.write(ready_w, b"1")  # only now may the child exit: else the server can kill it before it writes
                time.sleep(120)
                os._exit(0)
            os.read(ready_r, 1)
        time.sleep(req.get("sleep", 0))
        os._exit(req.get("code", 0))

    def handle(loop, req):
        if req["op"] == "echo":
            loop.answer({"id": req["id"], "echo": req["value"]})
        elif req["op"] == "spawn":  # boot's way: the pid at once, the exit later
            loop.answer({"id": req["id"], "pid": loop.fork(req)})
        else:  # artefact_runner's way: wait with a deadline
            status, killed = loop.wait(loop.fork(req), req["timeout"])
            loop.reap()
            loop.answer({"id": req["id"], "code": None if killed else os.waitstatus_to_exitcode(status), "killed": killed})

    forkloop.serve(preload=lambda: print("preloaded", file=sys.stderr), handle=handle, child=child, failed=70,
                   report_exits=sys.argv[1] == "async", kill_orphans=sys.argv[1] == "async")
    """
)


class Server:
    def __init__(self, mode: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert self.line() == "ready"

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline().decode().strip()

    def send(self, **req) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()

    def read(self) -> dict:
        return json.loads(self.line())

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        return self.proc.wait(timeout=10)


@pytest.fixture
def server(request):
    s = Server(request.param)
    yield s
    if s.proc.poll() is None:
        s.proc.kill()
        s.proc.wait()


@pytest.mark.parametrize("server", ["async"], indirect=True)
def test_async_answers_the_pid_at_once_and_reports_exits_later(server, tmp_path):
    server.send(op="echo", id=1, value="hi")
    assert server.read() == {"id": 1, "echo": "hi"}
    server.send(op="spawn", id=2, code=3, sleep=0.2)
    pid = server.read()["pid"]
    assert server.read() == {"exit": pid, "code": 3}
    server.send(op="spawn", id=3, **{"raise": True})
    pid = server.read()["pid"]
    assert server.read() == {"exit": pid, "code": 70}, "a child body that raises exits with `failed`"
    assert server.close() == 0
    err = server.proc.stderr.read()
    assert b"preloaded" in err and b"ValueError: the child body failed" in err


@pytest.mark.parametrize("server", ["async"], indirect=True)
def test_async_kills_an_orphan_that_lands_on_the_server(server, tmp_path):
    marker = tmp_path / "orphan.pid"
    server.send(op="spawn", id=1, orphan=str(marker))
    pid = server.read()["pid"]
    assert server.read() == {"exit": pid, "code": 0}
    assert marker.read_text(), "the child exits only after the grandchild wrote its pid"
    deadline = time.monotonic() + 30
    orphan = int(marker.read_text())
    while os.path.exists(f"/proc/{orphan}"):
        assert time.monotonic() < deadline, "the orphan outlived its parent"
        time.sleep(0.05)
    assert server.close() == 0


@pytest.mark.parametrize("server", ["sync"], indirect=True)
def test_sync_waits_with_a_deadline(server):
    server.send(op="job", id=1, code=5, timeout=10)
    assert server.read() == {"id": 1, "code": 5, "killed": False}
    start = time.monotonic()
    server.send(op="job", id=2, sleep=30, timeout=0.3)
    assert server.read() == {"id": 2, "code": None, "killed": True}
    assert time.monotonic() - start < 10
    server.send(op="job", id=3, timeout=10, **{"raise": True})
    assert server.read() == {"id": 3, "code": 70, "killed": False}
    assert server.close() == 0


def test_the_loop_imports_nothing_heavy():
    code = "import sys, torchcontracts.grading.forkloop; print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"

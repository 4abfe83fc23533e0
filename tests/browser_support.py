"""Drive the course in a real browser: JupyterLab served from a copy of the course, chromium via Playwright.

Used by tests/test_browser.py. Nothing here installs anything, and nothing imports Playwright until a
browser is actually launched, so importing this module is safe where Playwright is absent.

The check of one notebook is `check_notebook(...)`: it returns a list of problems (strings), empty when
the notebook is clean. Both the real test and the test of the test (a deliberately broken lesson) use it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
REQUIRE_ENV = "TC_REQUIRE_BROWSER"
NOTEBOOK_TIMEOUT_S = 180.0  # Run All to idle, per notebook
OPEN_TIMEOUT_S = 90.0  # page load plus kernel start
WIDGET_TIMEOUT_S = 30.0  # widgets to render after the kernel is idle; an explorer to redraw
EXPLORER_CALL = re.compile(r"\b\w*explorer\s*\(")  # a code cell that makes an explorer widget
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def missing_browser() -> str | None:
    """Why a browser test cannot run here (None when it can)."""
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is missing (pip install playwright; no `playwright install`)"
    return None


# --------------------------------------------------------------------------------------------- processes
def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (ppid, start time, state) from /proc."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        table[int(entry)] = (int(rest[1]), rest[19], rest[0])
    return table


def descendants(pid: int) -> dict[int, str]:
    """Live descendants of pid: pid -> start time (to tell a pid reused later from the same process)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for p, (pp, _, _) in table.items():
        children.setdefault(pp, []).append(p)
    found, todo = {}, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        if table[p][2] != "Z":
            found[p] = table[p][1]
        todo.extend(children.get(p, []))
    return found


def still_alive(procs: dict[int, str]) -> list[int]:
    table = _proc_table()
    return sorted(p for p, start in procs.items() if p in table and table[p][1] == start and table[p][2] != "Z")


def wait_gone(procs: dict[int, str], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while (alive := still_alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------------------------- server
@dataclass
class LabServer:
    """A JupyterLab server on a free port, in its own process group, serving `root`."""

    root: Path
    state: Path  # settings, workspaces, runtime and config folders, so nothing of the user's leaks in
    log: Path
    token: str = field(default_factory=lambda: os.urandom(16).hex())
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 90.0) -> None:
        env = {k: v for k, v in os.environ.items() if k != "MPLBACKEND"}  # an Agg backend would hide plots
        for name, var in [
            ("settings", "JUPYTERLAB_SETTINGS_DIR"),
            ("workspaces", "JUPYTERLAB_WORKSPACES_DIR"),
            ("runtime", "JUPYTER_RUNTIME_DIR"),
            ("config", "JUPYTER_CONFIG_DIR"),
            ("ipython", "IPYTHONDIR"),
        ]:
            (self.state / name).mkdir(parents=True, exist_ok=True)
            env[var] = str(self.state / name)
        # No "get notified about Jupyter news?" toast over the screenshots, and no calls out for news.
        settings = self.state / "settings" / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        errors = []
        for _ in range(3):  # a free port can be taken between bind and the server's own bind: try another
            self.port = free_port()
            cmd = [
                sys.executable,
                "-m",
                "jupyterlab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={self.port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={self.root}",
                f"--IdentityProvider.token={self.token}",
                "--LabApp.news_url=",
                "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
                "--LabApp.expose_app_in_browser=True",
            ]
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    cmd,
                    cwd=self.root,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.api("GET", "/api/status", timeout=2)
                    return
                except (OSError, urllib.error.URLError):
                    time.sleep(0.3)
            if self.proc.poll() is None:
                self.stop()
                errors.append(f"no answer on port {self.port} within {timeout:.0f} s")
            else:
                errors.append(f"exited with {self.proc.returncode} (port {self.port})")
        tail = self.log.read_text(errors="replace")[-1500:]
        raise RuntimeError(f"JupyterLab did not start: {'; '.join(errors)}; log tail: {tail}")

    def api(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> object:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            text = resp.read()
        return json.loads(text) if text else None

    def notebook(self, relpath: str) -> dict:
        quoted = urllib.parse.quote(relpath)
        return self.api("GET", f"/api/contents/{quoted}?content=1&type=notebook")["content"]

    def shutdown_sessions(self) -> None:
        for session in self.api("GET", "/api/sessions"):
            self.api("DELETE", f"/api/sessions/{session['id']}")

    def stop(self) -> list[str]:
        """Shut the server and its kernels down; return what is still alive afterwards (empty when clean)."""
        if self.proc is None:
            return []
        procs = descendants(self.proc.pid)
        procs[self.proc.pid] = _proc_table().get(self.proc.pid, (0, "", ""))[1]
        if self.proc.poll() is None:
            try:  # the polite way: the server shuts its kernels down and exits
                self.api("POST", "/api/shutdown", timeout=10)
            except (OSError, urllib.error.URLError):
                pass
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        pgid = self.proc.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.proc.wait(timeout=10)
        leaked = []
        try:
            os.killpg(pgid, 0)
            leaked.append(f"process group {pgid} still has members")
        except ProcessLookupError:
            pass
        alive = wait_gone(procs, 10)  # kernels run in sessions of their own, so check them one by one
        for pid in alive:
            leaked.append(f"pid {pid} ({Path(f'/proc/{pid}/cmdline').read_bytes()[:120]!r}) outlived the server")
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc = None
        return leaked


def copy_course(src_root: Path, dest: Path) -> Path:
    """Copy what a learner opens (notebooks/, labs/, README.md) and clear any stored counts and outputs."""
    import nbformat

    dest.mkdir(parents=True, exist_ok=True)
    for folder in ("notebooks", "labs"):
        shutil.copytree(
            src_root / folder, dest / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
        )
    shutil.copy2(src_root / "README.md", dest / "README.md")
    for path in dest.rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        nbformat.write(nb, path)
    return dest


# --------------------------------------------------------------------------------------------- browser
class Browser:
    """Playwright plus /usr/bin/chromium; `close()` returns the processes that outlived it."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        before = descendants(os.getpid())
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True)
        self._procs = {p: s for p, s in descendants(os.getpid()).items() if before.get(p) != s}

    def close(self) -> list[str]:
        try:
            self.browser.close()
        finally:
            self._pw.stop()
        return [f"browser process {pid} outlived the test" for pid in wait_gone(self._procs, 10)]


# JS run in the page. `nb()` is the open notebook panel (the app is exposed by --LabApp.expose_app_in_browser).
_JS_PANEL = "const nb = () => window.jupyterapp.shell.currentWidget;"
JS_READY = (
    _JS_PANEL
    + """
() => { const p = window.jupyterapp && nb();
  return !!(p && p.content && p.context && p.context.path === %s && p.sessionContext
            && p.sessionContext.session && p.sessionContext.session.kernel
            && p.sessionContext.session.kernel.status === 'idle'); }"""
)
JS_STATE = (
    _JS_PANEL
    + """
() => { const p = nb(); const k = p.sessionContext.session && p.sessionContext.session.kernel;
  const code = p.content.widgets.filter(w => w.model.type === 'code');
  return { kernel: k ? k.status : 'none',
           running: code.map((w, i) => w.model.executionState === 'running' ? i : -1).filter(i => i >= 0),
           counts: code.map(w => w.model.executionCount),
           prompts: code.map(w => (w.node.querySelector('.jp-InputArea-prompt') || {}).textContent || '') }; }"""
)
JS_WIDGETS = (
    _JS_PANEL
    + """
() => { const p = nb(); const res = [];
  p.content.widgets.filter(w => w.model.type === 'code').forEach((w, i) => {
    const outs = w.model.outputs.toJSON();
    const want = outs.filter(o => o.data && o.data['%s']).length;
    const got = w.outputArea.node.querySelectorAll(
      ':scope > .jp-OutputArea-child > .jp-OutputArea-output > .jupyter-widgets').length;
    const text = w.outputArea.node.textContent;
    if (want || got) res.push({cell: i, want, got, error: /Error displaying widget/.test(text)});
  });
  return { views: res, errorText: /Error displaying widget/.test(p.content.node.textContent) }; }"""
    % WIDGET_MIME
)
# An explorer: a widget view at the top of an output holding a dropdown (<select>) and a picture (<img>).
EXPLORERS = ".jp-OutputArea-output > .jupyter-widgets:has(select):has(img)"
JS_PICTURE = """
async (el) => {
  const parts = [];
  for (const img of el.querySelectorAll('img')) {
    if (!img.src) { parts.push('no-src'); continue; }
    const buf = await (await fetch(img.src)).arrayBuffer();
    const digest = await crypto.subtle.digest('SHA-256', buf);
    parts.push([...new Uint8Array(digest)].map(b => b.toString(16).padStart(2, '0')).join('').slice(0, 16));
  }
  return parts.join(',');
}"""


@dataclass
class Report:
    problems: list[str]
    seconds: float = 0.0  # Run All to idle
    total_seconds: float = 0.0  # open, run, widget checks, save
    notes: list[str] = field(default_factory=list)  # things handled on the way (retries), not failures
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step, for the timing report


class Timeout(Exception):
    pass


def _wait(page, js: str, arg=None, timeout: float = 30.0, what: str = "") -> None:
    try:
        page.wait_for_function(js, arg=arg, timeout=timeout * 1000, polling=250)
    except Exception as exc:  # playwright's TimeoutError
        if type(exc).__name__ == "TimeoutError":
            raise Timeout(f"{what} did not happen within {timeout:.0f} s") from None
        raise


def _state(page) -> dict:
    return page.evaluate(JS_STATE)


def _run_all(page, report: Report, attempts: int = 5) -> None:
    """Run > Run All Cells through the menu; retry while the click is swallowed (no cell starts)."""
    started = (
        "() => { const p = window.jupyterapp.shell.currentWidget;"
        " return p.content.widgets.some(w => w.model.type === 'code' &&"
        " (w.model.executionState === 'running' || w.model.executionCount !== null)); }"
    )
    for attempt in range(1, attempts + 1):
        page.keyboard.press("Escape")
        page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
        item = page.locator("li.lm-Menu-item[data-command='runmenu:run-all']")
        try:
            item.click(timeout=5000)
            _wait(page, started, timeout=5, what="Run All starting")
            if attempt > 1:
                report.notes.append(f"Run All started on click {attempt}")
            return
        except Exception as exc:  # swallowed click (or the menu closed under us): try again
            last = exc
    raise Timeout(f"Run All never started after {attempts} clicks ({type(last).__name__})")


def _wait_finished(page, timeout: float) -> dict:
    """Kernel idle and no cell running (or queued), twice in a row half a second apart."""
    deadline = time.monotonic() + timeout
    calm = 0
    while time.monotonic() < deadline:
        st = _state(page)
        calm = calm + 1 if st["kernel"] == "idle" and not st["running"] else 0
        if calm >= 2:
            return st
        time.sleep(0.5)
    st = _state(page)
    raise Timeout(
        f"Run All did not finish within {timeout:.0f} s (kernel {st['kernel']}, "
        f"code cells still running or queued: {st['running'][:8]})"
    )


def _check_widgets(page, problems: list[str]) -> None:
    deadline = time.monotonic() + WIDGET_TIMEOUT_S
    while True:
        w = page.evaluate(JS_WIDGETS)
        pending = [v for v in w["views"] if v["got"] < v["want"] and not v["error"]]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    for v in w["views"]:
        if v["error"]:
            problems.append(f"code cell {v['cell']}: 'Error displaying widget'")
        elif v["got"] < v["want"]:
            problems.append(
                f"code cell {v['cell']}: {v['want'] - v['got']} widget(s) not rendered within {WIDGET_TIMEOUT_S:.0f} s"
            )
    if w["errorText"] and not any("Error displaying widget" in p for p in problems):
        problems.append("'Error displaying widget' shown in the notebook")


def _check_explorers(page, expected: int, shots: Path, stem: str, problems: list[str]) -> int:
    """Every explorer redraws its picture when a dropdown changes. Returns how many were found."""
    explorers = page.locator(EXPLORERS)
    found = explorers.count()
    if found != expected:
        problems.append(
            f"expected {expected} explorer(s) (cells calling *explorer(...)), found {found} "
            f"rendered with a dropdown and a picture"
        )
    for i in range(found):
        ex = explorers.nth(i)
        ex.scroll_into_view_if_needed()
        before = ex.evaluate(JS_PICTURE)
        changed = False
        selects = ex.locator("select")
        tried = []
        for s in range(selects.count()):
            sel = selects.nth(s)
            options = sel.locator("option").evaluate_all("os => os.map(o => o.value)")
            current = sel.input_value()
            others = [o for o in options if o != current]
            if not others:
                continue
            sel.select_option(others[-1])
            tried.append(f"{current!r}->{others[-1]!r}")
            deadline = time.monotonic() + WIDGET_TIMEOUT_S
            while time.monotonic() < deadline:
                after = ex.evaluate(JS_PICTURE)
                if after and after != before and "no-src" not in after:
                    changed = True
                    break
                time.sleep(0.3)
            if changed:
                break
        page.wait_for_timeout(300)
        ex.screenshot(path=str(shots / f"{stem}-explorer{i + 1}.png"))
        if not changed:
            problems.append(f"explorer {i + 1}: the picture did not change after selecting {', '.join(tried)}")
        if "Traceback" in ex.inner_text():
            problems.append(f"explorer {i + 1}: shows a traceback after a dropdown change")
    return found


def _saved_errors(server: LabServer, page, relpath: str) -> dict:
    """Save through JupyterLab, then read the file back through the contents API."""
    page.evaluate("() => window.jupyterapp.commands.execute('docmanager:save')")
    deadline = time.monotonic() + 30
    want = [c for c in _state(page)["counts"]]
    while True:
        nb = server.notebook(relpath)
        counts = [c.get("execution_count") for c in nb["cells"] if c["cell_type"] == "code"]
        if counts == want or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    if counts != want:
        raise Timeout("the saved notebook never matched the browser's execution counts")
    return nb


def check_notebook(
    server: LabServer, browser: Browser, relpath: str, kind: str, shots: Path, timeout: float = NOTEBOOK_TIMEOUT_S
) -> Report:
    """Open `relpath` in JupyterLab, Run All, and return the problems found.

    kind "lesson": no error output, every code cell ran, widgets render, explorers redraw on a dropdown change.
    kind "lab": the same, except that error outputs must all be NotImplementedError (unsolved tasks).
    """
    assert kind in ("lesson", "lab"), kind
    t0 = time.monotonic()
    report = Report(problems=[])
    problems = report.problems
    stem = relpath.replace("/", "_").removesuffix(".ipynb")
    shots.mkdir(parents=True, exist_ok=True)
    source = json.loads((server.root / relpath).read_text())
    expected_explorers = sum(
        1 for c in source["cells"] if c["cell_type"] == "code" and EXPLORER_CALL.search("".join(c["source"]))
    )
    context = browser.browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    console_errors: list[str] = []
    page.on("pageerror", lambda exc: console_errors.append(str(exc)[:200]))
    try:
        page.goto(
            f"{server.url}/lab/tree/{urllib.parse.quote(relpath)}?reset&token={server.token}",
            timeout=OPEN_TIMEOUT_S * 1000,
        )
        _wait(
            page,
            JS_READY % json.dumps(relpath),
            timeout=OPEN_TIMEOUT_S,
            what="the notebook opening with an idle kernel",
        )
        report.phases["open"] = time.monotonic() - t0
        _run_all(page, report)
        t_run = time.monotonic()
        final = _wait_finished(page, timeout)
        report.seconds = time.monotonic() - t_run
        t = time.monotonic()
        _check_widgets(page, problems)
        page.screenshot(path=str(shots / f"{stem}.png"))
        report.phases["widgets+shot"] = time.monotonic() - t
        t = time.monotonic()
        nb = _saved_errors(server, page, relpath)
        report.phases["save"] = time.monotonic() - t
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        errors = [(i, o) for i, c in enumerate(code) for o in c.get("outputs", []) if o["output_type"] == "error"]
        for i, o in errors:
            if kind == "lab" and o.get("ename") == "NotImplementedError":
                continue
            problems.append(f"code cell {i} raised {o.get('ename')}: {str(o.get('evalue'))[:160]}")
        not_run = [i for i, c in enumerate(code) if c.get("execution_count") is None]
        if not_run and (kind == "lesson" or not errors):
            problems.append(f"code cells {not_run[:10]} never ran")
        if kind == "lab" and not_run and errors:
            report.notes.append(f"Run All stopped at code cell {errors[0][0]} (NotImplementedError)")
        if not any(final["counts"]):
            problems.append("no code cell ran")
        t = time.monotonic()
        _check_explorers(page, expected_explorers, shots, stem, problems)
        report.phases["explorers"] = time.monotonic() - t
        if console_errors:
            report.notes.append(f"page errors: {console_errors[:3]}")
    except Timeout as exc:
        problems.append(str(exc))
        try:
            page.screenshot(path=str(shots / f"{stem}-timeout.png"))
        except Exception:
            pass
    finally:
        t = time.monotonic()
        context.close()
        try:
            server.shutdown_sessions()  # free the kernel before the next notebook
        except (OSError, urllib.error.URLError) as exc:
            problems.append(f"could not shut its kernel down: {exc}")
        report.phases["close"] = time.monotonic() - t
    report.total_seconds = time.monotonic() - t0
    return report


def broken_copy(src: Path, dest: Path, message: str = "deliberately broken") -> Path:
    """A copy of a lesson with `raise RuntimeError(message)` as its second code cell."""
    import nbformat

    nb = nbformat.read(src, as_version=4)
    first_code = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
    nb.cells.insert(first_code + 1, nbformat.v4.new_code_cell(f"raise RuntimeError({message!r})"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, dest)
    return dest

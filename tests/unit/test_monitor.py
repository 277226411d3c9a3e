"""The monitor (ch_launcher/monitor.py) as its own process: it forks the launcher, reports every
other child's exit to it, forwards signals, stops what the launcher left and exits with its
status. Each story is a small program run in a subprocess (the monitor forks and waits for
signals, which a test process must not do to itself)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_monitor(body: str, timeout: float = 30.0, **popen) -> subprocess.Popen:
    program = textwrap.dedent("""
        import os, signal, sys, time
        from ch_launcher import monitor
        from ch_launcher.ch.exits import ExitReports

        def launcher(link):
        {body}
        sys.exit(monitor.run(launcher))
    """).format(body=textwrap.indent(textwrap.dedent(body), "    "))
    return subprocess.Popen([sys.executable, "-c", program], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def test_the_launchers_exit_status_is_the_monitors_and_an_orphans_exit_is_reported():
    p = run_monitor("""
        reports = ExitReports(link.exit_reports_fd)
        r, w = os.pipe()
        if os.fork() == 0:          # the spawner's double fork: the orphan goes to the monitor
            pid = os.fork()
            if pid == 0:
                os._exit(7)
            os.write(w, str(pid).encode()); os._exit(0)
        orphan = int(os.read(r, 32))
        code = reports.wait(orphan, 10)
        print("parent", os.getppid() == link.monitor_pid, "subreaper", link.subreaper, "orphan", code, flush=True)
        return 3
    """)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 3, err
    assert out.split() == ["parent", "True", "subreaper", "True", "orphan", "7"]


def test_sigterm_goes_to_the_launcher():
    p = run_monitor("""
        got = []
        signal.signal(signal.SIGTERM, lambda *a: got.append(1))
        print("ready", flush=True)
        while not got:
            signal.pause()
        return 0
    """)
    assert p.stdout.readline().strip() == "ready"
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 0


def test_what_the_launcher_leaves_is_stopped_and_a_killed_launcher_is_128_plus_the_signal():
    p = run_monitor("""
        r, w = os.pipe()
        if os.fork() == 0:
            pid = os.fork()
            if pid == 0:
                os.execvp("sleep", ["sleep", "300"])
            os.write(w, str(pid).encode()); os._exit(0)
        print(int(os.read(r, 32)), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    leftover = int(p.stdout.readline())
    assert p.wait(30) == 128 + signal.SIGKILL
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{leftover}") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not os.path.exists(f"/proc/{leftover}")  # SIGTERMed (and reaped) by the monitor

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


def run_monitor(body: str, timeout: float = 30.0, context: str = "", **popen) -> subprocess.Popen:
    """`body` is the launcher's function (of `link`); `context` the MonitorContext's arguments."""
    program = textwrap.dedent("""
        import os, signal, sys, time
        from ch_launcher import monitor
        from ch_launcher.ch.exits import ExitReports

        def launcher(link):
        {body}
        sys.exit(monitor.run(launcher, monitor.MonitorContext({context})))
    """).format(body=textwrap.indent(textwrap.dedent(body), "    "), context=context)
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
    assert not os.path.exists(f"/proc/{leftover}")  # killed (and reaped) by the monitor


def test_what_a_clean_launcher_leaves_gets_sigterm_and_what_a_crashed_one_leaves_sigkill(tmp_path):
    """A VMM whose launcher crashed has no one to drive it: it goes at once (as with a launcher
    that was PID 1); after a clean exit, a leftover may still finish on SIGTERM."""
    for crash in (False, True):
        marker = tmp_path / f"sigterm-{crash}"
        p = run_monitor(f"""
            r, w = os.pipe()
            up_r, up_w = os.pipe()
            if os.fork() == 0:
                pid = os.fork()
                if pid == 0:  # says "up" once its trap is set
                    os.dup2(up_w, 1)
                    os.execvp("sh", ["sh", "-c", "trap 'touch {marker}; exit 0' TERM; echo up; "
                                                 "while :; do sleep 0.05; done"])
                os.write(w, str(pid).encode()); os._exit(0)
            pid = int(os.read(r, 32))
            assert os.fdopen(up_r).readline() == "up\\n"
            print(pid, flush=True)
            if {crash}:
                os.kill(os.getpid(), signal.SIGKILL)
            return 0
        """)
        leftover = int(p.stdout.readline())
        assert p.wait(30) == (128 + signal.SIGKILL if crash else 0)
        assert not os.path.exists(f"/proc/{leftover}")
        assert marker.exists() is not crash


def test_the_containerdisk_containers_sockets_go_with_the_launcher_as_the_stock_monitor_removes_them(tmp_path):
    """Each containerDisk container serves a socket and ends once it is gone (kubevirt
    cmd/container-disk-v2alpha): removed, the pod ends with the launcher."""
    disks = tmp_path / "container-disks"
    disks.mkdir()
    for name in ("disk_0.sock", "disk_1.sock", "disk_0.img"):
        (disks / name).write_bytes(b"")
    p = run_monitor("return 0", context=f"container_disks={str(disks)!r}")
    assert p.wait(30) == 0
    assert sorted(f.name for f in disks.iterdir()) == ["disk_0.img"]


def test_a_launcher_that_dies_leaves_its_epitaph_to_the_monitor_which_logs_what_it_could_say(tmp_path):
    """No Notify server listens here: the monitor says so in its log and still ends at once
    with the launcher's status (the delivery itself: tests/unit/test_epitaph.py)."""
    epitaph = tmp_path / "epitaph.json"
    p = run_monitor(f"""
        open({str(epitaph)!r}, "w").write("{{}}")
        os.kill(os.getpid(), signal.SIGKILL)
    """, context=f"name='vm', namespace='ns', uid='u', epitaph={str(epitaph)!r}, "
                 f"notify_socket={str(tmp_path / 'absent.sock')!r}")
    _, err = p.communicate(timeout=30)
    assert p.returncode == 128 + signal.SIGKILL
    assert "the launcher died while its VM ran: could not tell virt-handler that the VM is gone" in err
    assert '"msg":"dirty ch-launcher shutdown: exit status -9"' in err

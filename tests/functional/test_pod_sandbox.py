"""The pod sandbox gives a program exactly the compute container's privileges, network and
devices, and leaves nothing behind (tests/functional/pod_sandbox.py says what is reproduced)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.functional.pod_probes import NET_BIND_SERVICE
from tests.functional.pod_sandbox import REPO, PodSandbox, missing_requirements, run

pytestmark = [pytest.mark.root, pytest.mark.timeout(60)]

PROBE = r"""
import json, os, socket, subprocess, sys
def caps(status):
    return {k: int(v, 16) for k, v in (l.split(":\t") for l in status.splitlines() if l.startswith("Cap"))}
me = open("/proc/self/status").read()
child = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("0.0.0.0", 67))
tun = os.open("/dev/net/tun", os.O_RDWR); os.close(tun)
kvm = os.path.exists("/dev/kvm") and (os.close(os.open("/dev/kvm", os.O_RDWR)) or True)
print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "me": caps(me),
                  "child": caps(child), "nnp": [l for l in me.splitlines() if l.startswith("NoNewPrivs")],
                  "links": sorted(os.listdir("/sys/class/net")), "kvm": kvm,
                  "umask": os.umask(0o22), "home_visible": os.path.isdir(sys.base_prefix)}))
"""


@pytest.fixture
def sandbox():
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    with PodSandbox() as pod:
        yield pod


def test_a_program_in_the_pod_runs_as_107_with_net_bind_service_only_and_its_children_with_nothing(sandbox):
    host_nodes = {path: os.stat(path) for path in ("/dev/kvm", "/dev/net/tun") if os.path.exists(path)}
    sandbox.masquerade(mtu=1400)

    done = subprocess.run(sandbox.python_command(["-c", PROBE]), capture_output=True, text=True, timeout=30,
                          check=False)

    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert (seen["uid"], seen["gid"], seen["groups"]) == (107, 107, [])
    nbs = 1 << NET_BIND_SERVICE
    assert seen["me"] == {"CapInh": 0, "CapPrm": nbs, "CapEff": nbs, "CapBnd": nbs, "CapAmb": 0}
    assert seen["child"] == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": nbs, "CapAmb": 0}
    assert seen["nnp"] == ["NoNewPrivs:\t1"]
    assert {"eth0", "k6t-eth0", "tap0", "lo"} <= set(seen["links"])  # /sys shows the pod's links
    assert seen["kvm"] == ("/dev/kvm" in host_nodes)
    assert seen["umask"] == 0o022  # the container runtime's default
    assert seen["home_visible"]
    for path, before in host_nodes.items():  # the host's own nodes are untouched
        after = os.stat(path)
        assert (after.st_mode, after.st_uid, after.st_gid) == (before.st_mode, before.st_uid, before.st_gid)


def test_the_tap_is_what_virt_handler_makes(sandbox):
    sandbox.masquerade(mtu=1400, queues=2)

    details = json.loads(sandbox.ip("-d", "-j", "link", "show", "tap0"))[0]

    assert details["mtu"] == 1400 and details["master"] == "k6t-eth0" and "UP" in details["flags"]
    info = details["linkinfo"]["info_data"]
    assert (info["type"], info["pi"], info["vnet_hdr"], info["multi_queue"], info["user"], info["group"]) == (
        "tap", False, True, True, 107, 107)


def test_closing_removes_the_namespaces_processes_and_files():
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    pod = PodSandbox()
    pod.masquerade()
    pod.guest_port("k6t-eth0", "52:54:00:00:00:01")
    sleeper = subprocess.Popen(pod.command(["sleep", "600"]), start_new_session=True)
    names = list(pod._namespaces)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{sleeper.pid}/comm").read_text().strip() != "sleep":  # in the pod, as 107
        assert time.monotonic() < deadline and sleeper.poll() is None
        time.sleep(0.01)

    pod.close()

    assert sleeper.wait(5) == -9
    listed = run("ip", "netns", "list").stdout
    assert not any(name in listed for name in names)
    assert not pod.root.exists()
    pod.close()  # idempotent


def test_the_interpreter_is_a_copy_so_the_hosts_python_gains_no_capability(sandbox):
    assert os.path.realpath(sandbox.python) != os.path.realpath(sys.executable)
    assert "cap_net_bind_service" not in run("getcap", os.path.realpath(sys.executable), check=False).stdout


def test_a_sandbox_left_by_a_killed_test_process_is_swept_by_the_next_one():
    reason = missing_requirements()
    if reason:
        pytest.skip(reason)
    child = subprocess.Popen(
        [sys.executable, "-c", (
            "from tests.functional.pod_sandbox import PodSandbox\n"
            "p = PodSandbox(); p.masquerade(); img = p.root / 'b.img'; img.write_bytes(bytes(1 << 20))\n"
            "p.block_device('blk', img); print(p.netns, p.root, flush=True)\nimport time; time.sleep(600)")],
        stdout=subprocess.PIPE, text=True, cwd=str(REPO))
    netns, root = child.stdout.readline().split()
    child.kill()
    child.wait(5)
    assert netns in run("ip", "netns", "list").stdout and os.path.isdir(root)

    with PodSandbox():
        pass

    assert netns not in run("ip", "netns", "list").stdout
    assert not os.path.exists(root)
    assert root not in run("losetup", "--noheadings", "--output", "BACK-FILE", "--list").stdout

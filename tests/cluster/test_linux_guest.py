"""A real Linux guest through the whole stack on the real node: ../shared/guest's kernel and the
initramfs of tests/linux_guest, booted the way KubeVirt users boot a kernel
(`spec.domain.firmware.kernelBoot`: a kernel-boot container image, `kernelArgs`), lived through
with `kubectl`, `virtctl` and the serial console.

A Linux boot takes minutes here (the guest's kernel code is emulated, and the machine is
shared), so two VMs carry every story, both created when the module starts:

- the VM `linux` (1 GiB, one socket of at most two, `maxGuest`, a masquerade NIC, cloud-init
  NoCloud, an SSH key from a Secret for the guest agent to install, a `guestAgentPing` readiness
  probe): the console, the pod network (DHCP, a pod reaching the guest, the guest reaching a
  Service), cloud-init, the guest agent (what it tells, its connection and the probe, the key),
  the dirty rate, vCPU and memory hotplug, then `virtctl stop` through the ACPI power button;
- the VMI `linux-reboot` (256 MiB, a pvpanic device, no NIC, an empty disk, an `exec` readiness
  probe): a guest reboot, `virtctl soft-reboot`, its boots counted in its serial log, a freeze
  by the Velero hook, then a kernel panic.

Both guests start Debian's qemu-ga on vsock at boot (tests/linux_guest: `rootfs/etc/inittab`).

The tests run in file order. The second VMI's reboots are started by one test and checked by a
later one, so that its boots run while the first VM's stories do (each guest has a vCPU of its
own on the node's two CPUs).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.apiserver.cluster import ClusterError
from tests.cluster.disks import vmm_info
from tests.cluster.guest_shell import GuestShell
from tests.cluster.images import LAUNCHER_IMAGE
from tests.cluster.linux_guest import IMAGE, INITRD_PATH, KERNEL_PATH, build_image, linux_vm, linux_vmi, load, missing
from tests.cluster.node import NodeCluster
from tests.framework import CmdClient
from tests.linux_guest import build as linux
from tests.linux_guest import console as guest

NAME = "linux"
REBOOTS = "linux-reboot"
HOSTNAME = "penguin"  # what the VM's user-data names it
USER_DATA = f"#cloud-config\nhostname: {HOSTNAME}\n"
BOOT_TIMEOUT = 1800  # one boot on a loaded machine (the kernel's code is emulated: 15 min and more at a load of 20)
# the tests that wait for boots (or for the guest's page faults) get more than the cluster suite's 900 s
slow = pytest.mark.timeout(2 * BOOT_TIMEOUT)
pytestmark = pytest.mark.linux_guest  # apart from `make test` (pyproject.toml's addopts): `make test-linux-guest`
# the VM's terminationGracePeriodSeconds: KubeVirt's default is 30 s, and on a loaded machine the
# guest's clean shutdown (its init ends every process, the kernel powers off) can take longer
GRACE_SECONDS = 120
# With a second vCPU online, the kernel's paravirtual spinlocks kick a waiting vCPU with a
# KVM hypercall (VMCALL); this host's PVM emulates it by rewriting the instruction in the
# guest's read-only kernel text, and the guest oopses (`#PF: supervisor write access in kernel
# mode`, RIP `kvm_kick_cpu`, "Kernel panic - not syncing: Fatal exception in interrupt"). The VM
# whose vCPU is hot-plugged boots without them.
SMP_KERNEL_ARGS = "nopvspin"
MiB = 1 << 20
SECRET = "linux-ssh"
AGENT_COMMAND = "qemu-ga --method=vsock-listen --path=4294967295:1023"  # docs/features.md, the guest's inittab
DATA_SERIAL = "kch-data"  # the empty disk's serial: the guest finds it by /sys/block/*/serial


def ssh_public_key(comment: str) -> str:
    """An ed25519 public key line in OpenSSH's format (its 32 key bytes made up: nothing signs with it)."""
    blob = b"".join(len(part).to_bytes(4, "big") + part for part in (b"ssh-ed25519", bytes(range(7, 39))))
    return f"ssh-ed25519 {base64.b64encode(blob).decode()} {comment}"


SSH_KEY = ssh_public_key("kch@linux-guest")


@dataclass
class Story:
    """What the module's stories share: when things started, what was measured."""

    started: dict[str, float] = field(default_factory=dict)
    measured: dict[str, float] = field(default_factory=dict)


def the_vm() -> dict[str, Any]:
    vm = linux_vm(NAME, memory="1Gi", user_data=USER_DATA)  # memory hotplug needs 1Gi at least (KubeVirt)
    domain = vm["spec"]["template"]["spec"]["domain"]
    domain["cpu"] = {"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 2}
    domain["memory"]["maxGuest"] = "2Gi"
    domain["firmware"]["kernelBoot"]["kernelArgs"] += f" {SMP_KERNEL_ARGS}"
    spec = vm["spec"]["template"]["spec"]
    spec["terminationGracePeriodSeconds"] = GRACE_SECONDS
    spec["accessCredentials"] = [{"sshPublicKey": {"source": {"secret": {"secretName": SECRET}},
                                                   "propagationMethod": {"qemuGuestAgent": {"users": ["root"]}}}}]
    spec["readinessProbe"] = {"guestAgentPing": {}, "periodSeconds": 2, "timeoutSeconds": 10, "failureThreshold": 2}
    return vm


def the_secret() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET}, "type": "Opaque",
            "stringData": {"key1": SSH_KEY}}


def the_reboot_vmi() -> dict[str, Any]:
    vmi = linux_vmi(REBOOTS, nic=False)
    vmi["spec"]["domain"]["devices"]["panicDevices"] = [{"model": "pvpanic"}]
    vmi["spec"]["domain"]["devices"]["disks"].append({"name": "data", "disk": {"bus": "virtio"}, "serial": DATA_SERIAL})
    vmi["spec"]["volumes"].append({"name": "data", "emptyDisk": {"capacity": "32Mi"}})
    # run through the agent (guest-exec): Ready while the agent answers, not while the guest reboots
    vmi["spec"]["readinessProbe"] = {"exec": {"command": ["cat", "/proc/uptime"]}, "periodSeconds": 3,
                                     "timeoutSeconds": 30, "failureThreshold": 1}
    return vmi


@pytest.fixture(scope="module")
def story(node_cluster: NodeCluster) -> Iterator[Story]:
    """The kernel-boot image loaded, the VM and the reboot VMI created (they boot meanwhile)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    load(node_cluster, build_image())
    started = time.monotonic()
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml([the_secret(), the_vm(), the_reboot_vmi()]))
    assert r.rc == 0, r.out
    try:
        yield Story(started={"created": started})
    finally:
        node_cluster.kubectl("delete", "vm", NAME, "--ignore-not-found", "--wait=false")
        node_cluster.kubectl("delete", "vmi", REBOOTS, "--ignore-not-found", "--wait=false")
        node_cluster.kubectl("delete", "secret", SECRET, "--ignore-not-found", "--wait=false")


def serial_log(cluster: NodeCluster, pod: dict[str, Any]) -> str:
    """What virt-tail printed of the guest's serial log ("" while kubelet cannot say yet)."""
    r = cluster.kubectl("logs", pod["metadata"]["name"], "-c", "guest-console-log")
    return r.out.replace("\r\n", "\n") if r.rc == 0 else ""


def wait_for_boots(cluster: NodeCluster, pod: dict[str, Any], count: int) -> str:
    """The serial log once it shows `count` ready lines."""
    def booted() -> str | None:
        log = serial_log(cluster, pod)
        return log if log.count(guest.READY) >= count else None
    found: str = cluster.wait_for(booted, f"{count} boot(s) of the Linux guest in its serial log",
                                  timeout=BOOT_TIMEOUT, every=2)
    return found


def running_vmi(cluster: NodeCluster, name: str = NAME, *, ready: bool | None = True,
                timeout: float = 180) -> tuple[dict[str, Any], dict[str, Any]]:
    """The VMI once Running (and Ready, unless `ready` is None: both VMIs are Ready only while
    their guest agent answers the readiness probe), and the launcher pod it runs in. After the
    hotplug story KubeVirt's workload updater keeps a migration target pod of the VM Pending
    beside it (one node), so the pod is the one in phase Running, not any pod the VMI created."""
    vmi = cluster.wait_for_vmi(name, ready=ready, timeout=timeout)
    pods = cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={vmi['metadata']['uid']}")["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    assert len(running) == 1, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
    pod: dict[str, Any] = running[0]
    return vmi, pod


@slow
def test_the_vm_boots_the_kernel_of_its_kernel_boot_container(node_cluster: NodeCluster, story: Story) -> None:
    """KubeVirt renders the kernel-boot container into the launcher pod (`container-disk`, which
    holds a socket while virt-handler bind-mounts the image's kernel and initrd into the
    launcher's view), and the VMM boots that kernel directly with the VMI's `kernelArgs`: the
    guest's init runs and says it is ready, in both VMs."""
    _vmi, pod = running_vmi(node_cluster, ready=None)
    containers = {c["name"]: c for c in pod["spec"]["containers"]}
    inits = {c["name"]: c for c in pod["spec"]["initContainers"]}
    for kernel_boot in (containers["volumekernel-boot-volume"], inits["volumekernel-boot-volume-init"]):
        assert (kernel_boot["image"], kernel_boot["command"]) == (IMAGE, ["/usr/bin/container-disk"]), kernel_boot
    assert containers["compute"]["image"] == LAUNCHER_IMAGE
    artifacts = "/var/run/kubevirt/container-disks/kernel-boot"  # KubeVirt's launcher view
    payload = vmm_info(node_cluster, pod)["config"]["payload"]
    assert payload == {"kernel": f"{artifacts}/{Path(KERNEL_PATH).name}",
                       "initramfs": f"{artifacts}/{Path(INITRD_PATH).name}",
                       "cmdline": f"{linux.kernel_args()} {SMP_KERNEL_ARGS}"}, payload
    log = wait_for_boots(node_cluster, pod, 1)
    story.measured["first boot"] = time.monotonic() - story.started["created"]
    assert f"{guest.BOOT} 6.1." in log and f"{guest.READY} cpus=0\n" in log, log
    _vmi, other = running_vmi(node_cluster, REBOOTS, ready=None)
    assert vmm_info(node_cluster, other)["config"]["payload"]["cmdline"] == linux.kernel_args()
    wait_for_boots(node_cluster, other, 1)
    story.measured["both booted"] = time.monotonic() - story.started["created"]
    print(f"\nkubectl create -> the Linux guests ready: {story.measured['first boot']:.0f} s (1 GiB), "
          f"both {story.measured['both booted']:.0f} s")


def test_a_guest_reboot_resets_the_vm_in_its_vmm(node_cluster: NodeCluster, story: Story) -> None:
    """`reboot` in the second guest: its init shuts down cleanly, the kernel resets the machine
    and Cloud Hypervisor resets the VM in its process, the same VMI and pod going on. Its new boot
    runs while the next stories do (`test_the_rebooted_guest_...` checks it). Its `exec`
    readiness probe, which virt-handler runs through the launcher and the guest agent
    (`guest-exec`), made it Ready; while the guest reboots no agent answers, and it is not."""
    vmi, pod = running_vmi(node_cluster, REBOOTS, timeout=600)  # Ready: the agent ran the probe's command
    with node_cluster.console(REBOOTS) as console:
        GuestShell(console, guest.prompt("localhost"))
        story.started["reboot"] = time.monotonic()
        console.type(b"reboot\r")
        console.wait_for(guest.GOING_DOWN, timeout=300)
        console.wait_for("reboot: Restarting system", timeout=300)
    again, pod_again = running_vmi(node_cluster, REBOOTS, ready=False, timeout=120)
    assert (again["metadata"]["uid"], pod_again["metadata"]["uid"]) == (vmi["metadata"]["uid"],
                                                                        pod["metadata"]["uid"])


def test_virtctl_console_shows_a_shell_that_answers(node_cluster: NodeCluster, story: Story) -> None:
    running_vmi(node_cluster)
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        assert shell.run("echo $((6 * 7))").out == "42\n"
        assert shell.run("uname -sm").out == "Linux x86_64\n"
        assert shell.run("false", check=False).rc == 1


def test_the_guests_dhcp_client_gets_kubevirts_masquerade_lease_from_the_launcher(node_cluster: NodeCluster,
                                                                                  story: Story) -> None:
    """The guest's own DHCP client (busybox udhcpc) asked on its NIC; the launcher's server on
    virt-handler's in-pod bridge answered with KubeVirt's masquerade lease: 10.0.2.2/24, the
    gateway 10.0.2.1, the pod's name servers, its MTU, the VMI's name. The guest configured
    itself with it; `status.interfaces` shows the pod's address."""
    vmi, pod = running_vmi(node_cluster)
    leases = guest.dhcp_leases(serial_log(node_cluster, pod))
    name = pod["metadata"]["name"]
    resolv = node_cluster.ok("exec", name, "-c", "compute", "--", "cat", "/etc/resolv.conf")
    nameservers = [line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")]
    mtu = node_cluster.ok("exec", name, "-c", "compute", "--", "cat", "/sys/class/net/eth0/mtu").strip()
    lease = leases["eth0"]
    assert (lease["address"], lease["router"], lease["server"], lease["mtu"], lease["hostname"]) == (
        "10.0.2.2/24", "10.0.2.1", "10.0.2.1", mtu, NAME), leases
    assert lease["dns"].split(",") == nameservers, (lease, resolv)
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        assert "inet 10.0.2.2/24 " in shell.run("ip -4 addr show eth0").out
        assert shell.run("ip route").out.startswith("default via 10.0.2.1 dev eth0")
        assert [line.split()[1] for line in shell.run("cat /etc/resolv.conf").out.splitlines()
                if line.startswith("nameserver")] == nameservers
    ip = pod["status"]["podIP"]
    (interface,) = vmi["status"]["interfaces"]
    assert (interface["name"], interface["ipAddress"]) == ("default", ip), interface


PEER_SERVER = """
import http.server, socket
class Peer(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"KCH-PEER {socket.gethostname()} saw {self.client_address[0]}\\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
http.server.HTTPServer(("", 8000), Peer).serve_forever()
"""
FETCH = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=60).read().decode())"


def peer_objects() -> list[dict[str, Any]]:
    """Another pod (a small HTTP server; the add-on's launcher image is the image with Python on
    the node) and a Service in front of it."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "linux-peer", "labels": {"app": "linux-peer"}},
           "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "peer", "image": LAUNCHER_IMAGE, "imagePullPolicy": "IfNotPresent",
                                    "command": ["python3", "-c", PEER_SERVER],
                                    "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 1}}]}}
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "linux-peer"},
               "spec": {"selector": {"app": "linux-peer"}, "ports": [{"port": 80, "targetPort": 8000}]}}
    return [pod, service]


def test_a_pod_reaches_a_listener_in_the_guest_and_the_guest_reaches_a_service(node_cluster: NodeCluster,
                                                                               story: Story) -> None:
    """The pod network for real: another pod connects to the VMI's pod IP and reaches busybox's
    httpd in the guest (virt-handler's masquerade rules forward it to 10.0.2.2); the guest
    reaches a Service's cluster IP, and the pod behind it sees the VMI's pod IP as the source."""
    _vmi, pod = running_vmi(node_cluster)
    r = node_cluster.kubectl("create", "-f", "-", input=node_cluster.yaml(peer_objects()))
    assert r.rc == 0, r.out
    try:
        node_cluster.wait_for(lambda: node_cluster.kubectl("wait", "pod/linux-peer", "--for=condition=Ready",
                                                           "--timeout=5s").rc == 0, "the peer pod to be ready",
                              timeout=120)
        cluster_ip = node_cluster.json("get", "service", "linux-peer")["spec"]["clusterIP"]
        vmi_ip = pod["status"]["podIP"]
        with node_cluster.console(NAME) as console:
            shell = GuestShell(console, guest.prompt(HOSTNAME))
            shell.run('mkdir -p /www && echo "KCH-LINUX-HTTPD $(hostname)" > /www/index.html && '
                      "httpd -p 8080 -h /www")
            inbound = node_cluster.ok("exec", "linux-peer", "--", "python3", "-c", FETCH,
                                      f"http://{vmi_ip}:8080/index.html")
            assert inbound == f"KCH-LINUX-HTTPD {HOSTNAME}\n\n", inbound
            outbound = shell.run(f"wget -q -O - http://{cluster_ip}/", timeout=180).out
            assert outbound == f"KCH-PEER linux-peer saw {vmi_ip}\n", outbound
            shell.run("killall httpd")
    finally:
        node_cluster.kubectl("delete", "-f", "-", "--wait=false", input=node_cluster.yaml(peer_objects()))


def test_the_guest_reads_the_cloud_init_nocloud_data_the_vmi_carries(node_cluster: NodeCluster, story: Story) -> None:
    """The launcher's NoCloud ISO (label cidata, Rock Ridge names) as the guest's init reads it:
    KubeVirt's meta-data (the instance id is the VMI's firmware UUID, the host name its name) and
    the VMI's user-data line for line, whose `hostname` names the guest (its prompt says so)."""
    vmi, pod = running_vmi(node_cluster)
    log = serial_log(node_cluster, pod)
    uuid = vmi["spec"]["domain"]["firmware"]["uuid"]
    assert f"{guest.CLOUD_INIT} instance-id {uuid}\n" in log, log
    assert f"{guest.CLOUD_INIT} local-hostname {NAME}\n" in log, log
    printed = [line.removeprefix(f"{guest.USER_DATA} ") for line in log.splitlines()
               if line.startswith(guest.USER_DATA)]
    assert printed == USER_DATA.splitlines(), log
    assert f"{guest.HOSTNAME} {HOSTNAME}\n" in log, log
    with node_cluster.console(NAME) as console:
        assert GuestShell(console, guest.prompt(HOSTNAME)).run("hostname").out == f"{HOSTNAME}\n"


def condition(cluster: NodeCluster, kind: str, name: str = NAME) -> str | None:
    """The status of the VMI's condition `kind` ("True", "False"), None when it has none."""
    return conditions(cluster.json("get", "vmi", name)).get(kind)


def virtctl_json(cluster: NodeCluster, *args: str) -> dict[str, Any]:
    r = cluster.virtctl(*args)
    assert r.rc == 0, r.out
    found: dict[str, Any] = json.loads(r.out)
    return found


def test_the_guest_agent_tells_virtctl_the_guests_os_users_and_filesystems(node_cluster: NodeCluster,
                                                                          story: Story) -> None:
    """Debian's qemu-ga, started by the guest's init on vsock port 1023 as docs/features.md says:
    virt-handler sets `AgentConnected` and `status.guestOSInfo`; `virtctl guestosinfo`, `userlist`
    and `fslist` answer with what the guest itself says (`uname -r`, its host name, `who`, the
    block devices mounted: the cloud-init disk)."""
    running_vmi(node_cluster)  # Ready: the guestAgentPing probe went through the agent
    node_cluster.wait_for(lambda: condition(node_cluster, "AgentConnected") == "True", "AgentConnected", timeout=60)
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        release = shell.run("uname -r").out.strip()
        mounts = {tuple(line.split()[1:3]) for line in shell.run("grep ^/dev/ /proc/mounts").out.splitlines()}
        who = shell.run("who 2>/dev/null").out
    info = virtctl_json(node_cluster, "guestosinfo", NAME)
    assert (info["hostname"], info["os"]["kernelRelease"], info["os"]["id"]) == (HOSTNAME, release, "debian"), info
    assert info["guestAgentVersion"].startswith("7."), info
    status = node_cluster.json("get", "vmi", NAME)["status"]["guestOSInfo"]
    assert (status["kernelRelease"], status["id"], status["prettyName"]) == (
        release, "debian", "Debian GNU/Linux 12 (bookworm)"), status
    assert (virtctl_json(node_cluster, "userlist", NAME).get("items") or []) == [] and who == ""  # nobody logged in
    filesystems = virtctl_json(node_cluster, "fslist", NAME)["items"]
    assert {(f["mountPoint"], f["fileSystemType"]) for f in filesystems} == mounts == {("/run/cidata", "iso9660")}


def test_agent_connected_and_the_guest_agent_ping_probe_follow_the_agent(node_cluster: NodeCluster,
                                                                         story: Story) -> None:
    """`killall qemu-ga` in the guest: the launcher hears the vsock connection close, virt-handler
    drops `AgentConnected`, and the `guestAgentPing` readiness probe makes the VMI not Ready. The
    agent started again: connected within seconds, Ready again."""
    running_vmi(node_cluster)
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        shell.run("killall qemu-ga")
        stopped = time.monotonic()
        node_cluster.wait_for(lambda: condition(node_cluster, "AgentConnected") != "True", "AgentConnected to go",
                              timeout=60)
        gone = time.monotonic() - stopped
        node_cluster.wait_for_vmi(NAME, ready=False, timeout=60)
        started = time.monotonic()
        # in the background (`-d` would lock its pid file, and this kernel has no file locking)
        shell.run(f"{AGENT_COMMAND} </dev/null >/dev/null 2>&1 & true")
        node_cluster.wait_for(lambda: condition(node_cluster, "AgentConnected") == "True", "AgentConnected again",
                              timeout=60, every=0.5)
        connected = time.monotonic() - started
    node_cluster.wait_for_vmi(NAME, ready=True, timeout=60)
    print(f"\nqemu-ga killed -> AgentConnected gone {gone:.1f} s; started -> AgentConnected {connected:.1f} s")
    assert connected < 20, connected


def test_the_guest_agent_installs_the_ssh_key_of_the_secret_for_root(node_cluster: NodeCluster, story: Story) -> None:
    """`accessCredentials`: the Secret's key, propagated by the launcher through the agent
    (`guest-ssh-add-authorized-keys`, as virt-launcher does), is root's `authorized_keys`;
    virt-handler says so with `AccessCredentialsSynchronized`."""
    running_vmi(node_cluster)
    node_cluster.wait_for(lambda: condition(node_cluster, "AccessCredentialsSynchronized") == "True",
                          "AccessCredentialsSynchronized", timeout=120)
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        assert shell.run("cat /root/.ssh/authorized_keys").out.splitlines() == [SSH_KEY]
        assert shell.run("stat -c %a /root/.ssh").out == "700\n"


def dirty_rate(cluster: NodeCluster) -> float:
    """The VM's dirty rate in bytes/s as virt-handler's /metrics shows it (one scrape)."""
    for line in cluster.virt_handler_metrics().splitlines():
        if line.startswith("kubevirt_vmi_dirty_rate_bytes_per_second{") and f'name="{NAME}"' in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"virt-handler's /metrics has no dirty rate of {NAME}")


@slow
def test_the_dirty_rate_virt_handler_scrapes_follows_the_guests_writes(node_cluster: NodeCluster, story: Story) -> None:
    """virt-handler asks the launcher for the dirty rate at every scrape (the launcher samples the
    guest's pages as QEMU does, 512 per GiB: each changed sample counts about 2 MiB/s here). With
    the guest idle it is near zero; while a program in the guest rewrites 8 MiB of its memory
    over and over (16 MiB touched: awk allocates each new string before freeing the old), it is
    well above."""
    running_vmi(node_cluster)
    idle = [dirty_rate(node_cluster) for _ in range(3)]
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        shell.run("/etc/kch/dirty-memory 8 & echo $! > /run/dirty.pid")
        try:
            # the writer first touches its pages: each page fault is emulated kernel code, a minute or two
            busy: float = node_cluster.wait_for(lambda: (rate := dirty_rate(node_cluster)) > 8 * MiB and rate,
                                                "the dirty rate to rise", timeout=600, every=3)
        finally:
            shell.run("kill $(cat /run/dirty.pid)")
    after = node_cluster.wait_for(lambda: (rate := dirty_rate(node_cluster)) <= 4 * MiB and [rate],
                                  "the dirty rate to fall back", timeout=60, every=3)
    print(f"\ndirty rate: idle {[round(r / MiB, 1) for r in idle]} MiB/s, writing 8 MiB {busy / MiB:.1f} MiB/s, "
          f"after {after[0] / MiB:.1f} MiB/s")
    assert max(idle) <= 4 * MiB, idle  # two changed samples at most


@slow
def test_the_rebooted_guest_boots_again_and_virtctl_soft_reboot_powers_it_off(node_cluster: NodeCluster,
                                                                               story: Story) -> None:
    """The second guest's reboot brought it up again (a second boot in its serial log). Then
    `virtctl soft-reboot`: the launcher presses the ACPI power button and the guest shuts down
    cleanly; the launcher boots it again (`test_after_the_soft_reboot_...` checks it). Once the
    rebooted guest's agent runs, the `exec` probe makes the VMI Ready again."""
    _vmi, pod = running_vmi(node_cluster, REBOOTS, ready=None)
    wait_for_boots(node_cluster, pod, 2)
    story.measured["reboot"] = time.monotonic() - story.started["reboot"]
    node_cluster.wait_for_vmi(REBOOTS, ready=True, timeout=300)
    with node_cluster.console(REBOOTS) as console:
        GuestShell(console, guest.prompt("localhost"))
        story.started["soft-reboot"] = time.monotonic()
        r = node_cluster.virtctl("soft-reboot", REBOOTS)
        assert (r.rc, r.lines[-1]) == (0, f"VMI {REBOOTS} was scheduled to soft-reboot"), r.out
        console.wait_for(guest.POWER_BUTTON, timeout=300)
        console.wait_for(guest.GOING_DOWN, timeout=300)


def call_launcher(cluster: NodeCluster, pod: dict[str, Any], rpc: str, vmi: dict[str, Any]) -> dict[str, Any]:
    """`rpc` with `vmi` on the launcher's command socket, as virt-handler makes it (it finds the
    socket in the pod's `sockets` emptyDir under kubelet's pods directory); the Domain after it."""
    sockets = (cluster.node_dir / "kubelet" / "pods" / pod["metadata"]["uid"] / "volumes"
               / "kubernetes.io~empty-dir" / "sockets")
    with tempfile.TemporaryDirectory(prefix="kch") as short:  # a unix socket's path holds 107 bytes
        os.symlink(sockets, f"{short}/s")

        async def call() -> dict[str, Any]:
            async with CmdClient(f"{short}/s/launcher-sock") as client:
                await client.vmi_command(rpc, vmi)
                domain = await client.get_domain()
                assert domain is not None
                return domain
        return asyncio.run(call())


def conditions(vmi: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in vmi.get("status", {}).get("conditions", [])}


def migration_report(cluster: NodeCluster, vmi: dict[str, Any]) -> str:
    """What KubeVirt did about a VMI's migration: its migrations, its pods, its events."""
    lines = [f"migration {m['metadata']['name']}: {m.get('status', {}).get('phase')} "
             f"{[(c['type'], c.get('reason'), c.get('message')) for c in m.get('status', {}).get('conditions', [])]}"
             for m in cluster.json("get", "vmim")["items"]]
    pods = cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={vmi['metadata']['uid']}")["items"]
    for p in pods:
        states = [(c["type"], c["status"], c.get("message")) for c in p["status"].get("conditions", [])]
        lines.append(f"pod {p['metadata']['name']}: {p['status'].get('phase')} {states}")
    for uid in [vmi["metadata"]["uid"], *(p["metadata"]["uid"] for p in pods)]:
        events = cluster.json("get", "events", "--field-selector", f"involvedObject.uid={uid}")["items"]
        lines += [f"event {e['involvedObject']['name']}: {e['reason']}: {e['message']}" for e in events]
    return "\n".join(lines)


def test_vcpu_and_memory_hotplug_reach_the_guest(node_cluster: NodeCluster, story: Story) -> None:
    """Raising `sockets` and `memory.guest` of the running VM (KubeVirt's default rollout strategy,
    LiveUpdate): virt-controller patches the VMI, marks it HotVCPUChange and HotMemoryChange, and
    its workload updater starts a live migration into a pod sized for the new values, which on
    this one node cannot be scheduled (KubeVirt keeps a migration's target off its source's node;
    and on this PVM machine no switch-over succeeds anyway, `GetNestedState`). (The VM has no
    writable local disk: the add-on's migration validator would refuse that migration,
    DisksNotLiveMigratable, and the updater could not even start it.) After the
    switch-over, the target's virt-handler would call SyncVirtualMachineCPUs and
    SyncVirtualMachineMemory with that VMI (`pkg/virt-handler/migration-target.go`): the test
    makes those two calls on the launcher's socket. The guest's ACPI sees the new vCPU and its
    init onlines it; its virtio-mem driver plugs the memory and MemTotal grows; virt-handler,
    which reads the Domain, shows it in `status.memory.guestCurrent`. (`status.currentCPUTopology`
    is written by the migration target's virt-handler only: here it stays at one socket.)"""
    vmi, pod = running_vmi(node_cluster)
    with node_cluster.console(NAME) as console:
        shell = GuestShell(console, guest.prompt(HOSTNAME))
        assert shell.run("cat /sys/devices/system/cpu/online").out == "0\n"
        mem_before = int(shell.run("grep MemTotal /proc/meminfo").out.split()[1])
        patch = [{"op": "replace", "path": "/spec/template/spec/domain/cpu/sockets", "value": 2},
                 {"op": "replace", "path": "/spec/template/spec/domain/memory/guest", "value": "1152Mi"}]
        node_cluster.ok("patch", "vm", NAME, "--type", "json", "-p", json.dumps(patch))

        def patched() -> dict[str, Any] | None:
            found: dict[str, Any] = node_cluster.json("get", "vmi", NAME)
            domain = found["spec"]["domain"]
            done = ((domain["cpu"]["sockets"], domain["memory"]["guest"]) == (2, "1152Mi")
                    and {"HotVCPUChange", "HotMemoryChange"} <= set(conditions(found)))
            return found if done else None
        changed: dict[str, Any] = node_cluster.wait_for(patched, "virt-controller to patch the VMI", timeout=60)
        assert changed["status"]["currentCPUTopology"]["sockets"] == 1

        def migration_target_unschedulable() -> str | None:
            pods = node_cluster.json("get", "pods", "-l", f"kubevirt.io/created-by={vmi['metadata']['uid']}")
            events = [e["message"] for p in pods["items"] if p["metadata"]["uid"] != pod["metadata"]["uid"]
                      for e in node_cluster.json("get", "events", "--field-selector",
                                                 f"involvedObject.uid={p['metadata']['uid']}")["items"]]
            return next((m for m in events if "didn't match pod anti-affinity rules" in m), None)
        try:
            node_cluster.wait_for(migration_target_unschedulable, "the migration target pod to stay unscheduled",
                                  timeout=120, every=2)
        except ClusterError as e:
            raise AssertionError(f"{e}\n{migration_report(node_cluster, vmi)}") from None

        domain = call_launcher(node_cluster, pod, "SyncVirtualMachineCPUs", changed)
        assert [v["Enabled"] for v in domain["Spec"]["VCPUs"]["VCPU"]] == ["yes", "yes"], domain["Spec"]["VCPUs"]
        console.wait_for(f"{guest.CPU_ONLINE} 1", timeout=300)
        assert shell.run("cat /sys/devices/system/cpu/online", timeout=300).out == "0-1\n"
        call_launcher(node_cluster, pod, "SyncVirtualMachineMemory", changed)
        console.wait_for(guest.MEMORY_ONLINE, timeout=300)
        mem_after = int(shell.run("grep MemTotal /proc/meminfo", timeout=300).out.split()[1])
    print(f"\nthe guest's MemTotal {mem_before} kB -> {mem_after} kB")
    assert mem_after - mem_before == 128 * 1024, (mem_before, mem_after)  # one 128 MiB memory block
    node_cluster.wait_for(lambda: node_cluster.json("get", "vmi", NAME)["status"]["memory"]["guestCurrent"]
                          == "1152Mi", "virt-handler to show the plugged memory", timeout=120, every=2)


def test_virtctl_stop_powers_the_guest_off_through_acpi_well_within_its_grace_period(node_cluster: NodeCluster,
                                                                                    story: Story) -> None:
    """The launcher presses the ACPI power button, the guest's init shuts down cleanly and the
    kernel powers off (ACPI S5): the VMI and its pod are gone before the grace period ends, and
    the VMM was never killed."""
    _vmi, pod = running_vmi(node_cluster)
    name = pod["metadata"]["name"]
    logs = node_cluster.follow_logs(name, "compute")
    try:
        with node_cluster.console(NAME) as console:
            start = time.monotonic()
            r = node_cluster.virtctl("stop", NAME)
            assert (r.rc, r.lines) == (0, [f"VM {NAME} was scheduled to stop"]), r.out
            console.wait_for(guest.POWER_BUTTON, timeout=GRACE_SECONDS)
        node_cluster.wait_for(lambda: node_cluster.kubectl("get", "pod", name).rc != 0, "the launcher pod to go",
                              timeout=GRACE_SECONDS + 60)
        gone = time.monotonic() - start
        log = logs.communicate(timeout=30)[0]
    finally:
        if logs.poll() is None:
            logs.kill()
    print(f"\nvirtctl stop -> launcher pod gone: {gone:.1f} s (grace period {GRACE_SECONDS} s)")
    messages = [json.loads(line).get("msg", "") for line in log.splitlines() if line.startswith("{")]
    assert any(m.startswith("ShutdownVirtualMachine: ") and "power-button" in m for m in messages), log
    assert "VM is down: Shutdown" in messages, log  # the guest powered off: no kill at the grace period's end
    assert not any(m.startswith("KillVirtualMachine") for m in messages), log
    assert node_cluster.kubectl("get", "vmi", NAME).rc != 0


@slow
def test_the_launcher_booted_the_soft_rebooted_guest_a_third_time(node_cluster: NodeCluster, story: Story) -> None:
    """The launcher booted the second VM again after its soft reboot: the same VMI and pod, three
    boots in the serial log, two clean shutdowns; its agent runs the probe's command again."""
    _vmi, pod = running_vmi(node_cluster, REBOOTS, ready=None)
    log = wait_for_boots(node_cluster, pod, 3)
    story.measured["soft-reboot"] = time.monotonic() - story.started["soft-reboot"]
    assert (log.count(guest.BOOT), log.count(guest.READY), log.count(guest.GOING_DOWN)) == (3, 3, 2), log
    print(f"\nthe second guest: reboot -> ready again {story.measured['reboot']:.0f} s, "
          f"virtctl soft-reboot -> ready again {story.measured['soft-reboot']:.0f} s")
    node_cluster.wait_for_vmi(REBOOTS, ready=True, timeout=300)


def test_virt_freezer_freezes_and_thaws_the_guests_filesystems(node_cluster: NodeCluster, story: Story) -> None:
    """Velero's hook, `virt-freezer --freeze` in the compute container of the second VMI (the first
    keeps no writable local disk: one would make it unmigratable, see the hotplug story): the
    launcher asks the agent (`guest-fsfreeze-freeze`), the guest's ext4 on the empty disk is frozen
    (a write to it blocks, the VMI's `fsFreezeStatus` is `frozen`); `--unfreeze` thaws it and the
    write completes."""
    _vmi, pod = running_vmi(node_cluster, REBOOTS)
    freezer = ("exec", pod["metadata"]["name"], "-c", "compute", "--", "/usr/bin/virt-freezer")
    with node_cluster.console(REBOOTS) as console:
        shell = GuestShell(console, guest.prompt("localhost"))
        disk = shell.run(f"grep -l {DATA_SERIAL} /sys/block/*/serial").out.split("/")[3]
        shell.run(f"mke2fs -q /dev/{disk} && mkdir -p /data && mount -t ext4 /dev/{disk} /data", timeout=600)
        try:
            r = node_cluster.kubectl(*freezer, "--freeze", "--name", REBOOTS, "--namespace", "default")
            assert r.rc == 0, r.out
            node_cluster.wait_for(lambda: node_cluster.json("get", "vmi", REBOOTS)["status"].get("fsFreezeStatus")
                                  == "frozen", "virt-handler to show the guest frozen", timeout=60)
            shell.run("touch /data/written & echo $! > /run/kch/writer")

            def blocked() -> bool:
                state = shell.run("grep ^State: /proc/$(cat /run/kch/writer)/status", check=False).out
                return "D (disk sleep)" in state
            node_cluster.wait_for(blocked, "the write to block on the frozen filesystem", timeout=120, every=1)
            assert shell.run("[ -e /data/written ]", check=False).rc == 1
            r = node_cluster.kubectl(*freezer, "--unfreeze", "--name", REBOOTS, "--namespace", "default")
            assert r.rc == 0, r.out
            node_cluster.wait_for(lambda: shell.run("[ -e /data/written ]", check=False).rc == 0,
                                  "the write to complete once thawed", timeout=120, every=1)
            node_cluster.wait_for(lambda: "fsFreezeStatus" not in node_cluster.json("get", "vmi", REBOOTS)["status"],
                                  "virt-handler to show the guest thawed", timeout=60)
        finally:
            node_cluster.kubectl(*freezer, "--unfreeze", "--name", REBOOTS, "--namespace", "default")
            shell.run("umount /data", check=False, timeout=300)


def test_a_kernel_panic_fails_the_vmi_as_under_qemu(node_cluster: NodeCluster, story: Story) -> None:
    """`echo c > /proc/sysrq-trigger`: the kernel panics and its pvpanic driver tells the pvpanic
    device KubeVirt's `panicDevices` asked for; the VMI ends Failed with a GuestPanicked Warning,
    as under QEMU."""
    vmi, pod = running_vmi(node_cluster, REBOOTS)
    with node_cluster.console(REBOOTS) as console:
        GuestShell(console, guest.prompt("localhost"))
        console.type(b"echo c > /proc/sysrq-trigger\r")
        console.wait_for(guest.PANIC, timeout=300)
    node_cluster.wait_for_vmi(REBOOTS, "Failed", timeout=120)
    events = node_cluster.json("get", "events", "--field-selector", f"involvedObject.uid={vmi['metadata']['uid']}")
    found = {(e["type"], e["reason"], e["message"]) for e in events["items"]}
    assert ("Warning", "GuestPanicked", "GuestPanicked (details unavailable)") in found, found
    assert "Kernel panic - not syncing: sysrq triggered crash" in serial_log(node_cluster, pod)

"""The README's "Use" on a real node: its VirtualMachine (a containerDisk, cloud-init NoCloud, a
masquerade interface on the pod network, runStrategy Always), with the one change a machine
without a registry needs (the containerDisk is the local image of `images.py`), lived through as
a user does: `kubectl apply`, `kubectl get vmi`, `virtctl console`, `pause`/`unpause`,
`soft-reboot`, `restart`, `stop` and `start`. Every assertion is on what kubectl or virtctl print,
or on what an administrator of the node would look at (the pod's cgroup, its network namespace).

The tests run in file order on one VM, which must stay the first VMI and pod until `restart`
(kubelet evicted launcher pods once, and the VM's runStrategy hid it behind a new VMI). The
memory story reads the `compute` cgroup's peak after the stories of the launcher and the VMM
(console, reboots, metrics scrapes, pause) and before those that run programs in that container
(`kubectl exec`), whose own memory counts there too; `stop`, then `start`, come last."""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from admission.mutate import RECORD_ANNOTATION
from ch_launcher.kubevirt.quantity import quantity_bytes
from tests.apiserver.readme import use_vm
from tests.cluster.images import DISK_IMAGE, LAUNCHER_IMAGE
from tests.cluster.node import NodeCluster, archive_reference
from tests.functional.pod_probes import udhcpc
from tests.manifests.render import REPO

NAME = "fedora-ch"
README_DISK = "quay.io/containerdisks/fedora:latest"
MiB = 1 << 20
# README "Admission and the memory overhead": the launcher's and the VMM's terms are their measured
# memory plus 26 % and 24 %: the pod's real use must leave at least that much room in the overhead.
HEADROOM = 1.24
FIRST: dict[str, str] = {}  # the uids of the README VM's first VMI and launcher pod


def readme_check() -> list[str]:
    """README "Use": the kubectl command that shows which launcher a VMI runs, as arguments."""
    text = (REPO / "README.md").read_text()
    use = text[text.index("## Use (annotate a VMI)"):]
    (command,) = re.findall(r"To see that a VMI runs on Cloud Hypervisor:\s+`kubectl ([^`]+)`", use)
    return shlex.split(command)


def vmm_pid(cluster: NodeCluster, pod: dict[str, Any]) -> str:
    """The cloud-hypervisor process of the pod's compute container (from its cgroup)."""
    return cluster.process_in(pod, "compute", "cloud-hyperviso")


def table(run_out: str) -> list[dict[str, str]]:
    """`kubectl get` output as rows keyed by the header's columns."""
    header, *rows = run_out.splitlines()
    keys = header.split()
    return [dict(zip(keys, row.split(), strict=False)) for row in rows]


def conditions(vmi: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason", "")) for c in vmi["status"].get("conditions", [])}


def wait_for_vm_row(cluster: NodeCluster, status: str, ready: str) -> dict[str, str]:
    """`kubectl get vm`'s row once it shows `status` and `ready`: virt-controller writes the VM's
    status after the VMI's, so a VMI that is Ready (or gone) is not yet a VM that says so."""
    def shown() -> dict[str, str] | None:
        (row,) = table(cluster.ok("get", "vm", NAME))
        return row if (row["STATUS"], row["READY"]) == (status, ready) else None
    found: dict[str, str] = cluster.wait_for(shown, f"VM {NAME} to show {status}, ready {ready}", timeout=90)
    return found


def wait_for_vmi_state(cluster: NodeCluster, state: Callable[[dict[str, Any]], bool], what: str,
                       timeout: float = 90) -> dict[str, Any]:
    """The VMI once `state` holds for it (it may not exist yet, or still be an older one)."""
    def reached() -> dict[str, Any] | None:
        r = cluster.kubectl("get", "vmi", NAME, "-o", "json")
        vmi: dict[str, Any] | None = json.loads(r.out) if r.rc == 0 else None
        return vmi if vmi is not None and state(vmi) else None
    found: dict[str, Any] = cluster.wait_for(reached, what, timeout=timeout, every=0.5)
    return found


@pytest.fixture(scope="module")
def readme_vm(node_cluster: NodeCluster) -> Iterator[dict[str, Any]]:
    vm = use_vm()
    volumes = vm["spec"]["template"]["spec"]["volumes"]
    (disk,) = [v for v in volumes if "containerDisk" in v]
    assert disk["containerDisk"]["image"] == README_DISK
    disk["containerDisk"]["image"] = DISK_IMAGE
    applied = node_cluster.kubectl("apply", "-f", "-", input=node_cluster.yaml(vm))
    assert (applied.rc, applied.lines) == (0, [f"virtualmachine.kubevirt.io/{NAME} created"])
    yield vm
    node_cluster.kubectl("delete", "vm", NAME, "--ignore-not-found", "--wait=false")


def test_the_readmes_vm_runs_on_cloud_hypervisor_in_a_pod_of_the_built_image(node_cluster: NodeCluster,
                                                                            readme_vm: dict[str, Any]):
    # what the rows below show, each written by its own component: Ready (virt-handler),
    # LiveMigratable (virt-controller), the guest's address (virt-handler, from the Domain)
    vmi = wait_for_vmi_state(node_cluster, lambda v: conditions(v).get("Ready", ("",))[0] == "True"
                             and conditions(v).get("LiveMigratable", ("",))[0] == "True"
                             and bool((v["status"].get("interfaces") or [{}])[0].get("ipAddress")),
                             f"VMI {NAME} to be Ready and LiveMigratable with an address")
    pod = node_cluster.launcher_pod(vmi)
    FIRST.update(vmi=vmi["metadata"]["uid"], pod=pod["metadata"]["uid"])
    (row,) = table(node_cluster.ok("get", "vmi", NAME))
    assert (row["NAME"], row["PHASE"], row["IP"], row["NODENAME"], row["READY"]) == (
        NAME, "Running", pod["status"]["podIP"], "node01", "True")
    # KubeVirt's own conditions: Ready, and LiveMigratable as KubeVirt computes it for these volumes
    found = conditions(vmi)
    assert found["Ready"][0] == "True" and found["LiveMigratable"][0] == "True", found
    assert "Paused" not in found

    # the README's check prints the ch-launcher image; KubeVirt's status keeps KubeVirt's launcher
    # image (the add-on's /mutate-vmi writes it, so that the workload updater leaves the VMI alone)
    assert node_cluster.kubectl(*readme_check()).out == LAUNCHER_IMAGE
    assert vmi["status"]["launcherContainerImageVersion"] == node_cluster.launcher_image()
    assert "kubevirt.io/outdatedLauncherImage" not in vmi["metadata"].get("labels", {})
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == "compute")
    assert node_cluster.images is not None
    assert (compute["image"], compute["command"][0]) == (LAUNCHER_IMAGE, "/usr/bin/ch-launcher")
    assert status["imageID"] == archive_reference(node_cluster.images.launcher) and status["ready"]
    assert "devices.kubevirt.io/vhost-net" not in compute["resources"]["requests"]
    record = json.loads(pod["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record["removedResources"] == ["devices.kubevirt.io/vhost-net"]
    # the other containers keep KubeVirt's image (virt-tail, container-disk)
    others = {c["name"]: c["image"] for c in pod["spec"]["containers"] + pod["spec"]["initContainers"]
              if c["name"] != "compute"}
    assert others["guest-console-log"] == node_cluster.launcher_image()
    assert others["container-disk-binary"] == node_cluster.launcher_image()


def launcher_log_errors(node_cluster: NodeCluster, pod: dict[str, Any]) -> tuple[list[str], str]:
    """The compute container's error-level lines, and its whole log (for the message)."""
    log = node_cluster.ok("logs", pod["metadata"]["name"], "-c", "compute")
    return [line for line in log.splitlines() if '"level":"error"' in line], log


def test_the_launcher_logs_no_error_while_the_vm_starts(node_cluster: NodeCluster, readme_vm: dict[str, Any]):
    """A non-root VMI's pod gets /dev/kvm from virt-handler only just before the first Sync: the
    launcher waits for it quietly (before the fix it logged 'cloud-hypervisor did not start ...
    Permission denied' at error level at every start here)."""
    pod = node_cluster.launcher_pod(node_cluster.wait_for_vmi(NAME, ready=True))
    errors, log = launcher_log_errors(node_cluster, pod)
    assert errors == [], log
    assert any("cloud-hypervisor " in line and " is up (pid " in line for line in log.splitlines()), log


def test_virtctl_console_shows_the_guest_and_echoes_what_is_typed(node_cluster: NodeCluster):
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    pod = node_cluster.launcher_pod(vmi)
    with node_cluster.console(NAME) as console:
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO")
        console.type(b"typed through virt-api")
        console.wait_for("typed through virt-api")
        # a soft reboot while connected: the power button, then the guest's ready line again
        r = node_cluster.virtctl("soft-reboot", NAME)
        assert (r.rc, r.lines[-1]) == (0, f"VMI {NAME} was scheduled to soft-reboot"), r.out
        console.wait_for("KCH-GUEST-POWER-BUTTON")
        console.wait_for("KCH-GUEST-READY")
        console.type(b"~h")
        console.wait_for("KCH-GUEST-HELLO", count=2)
        # the guest rebooting itself: the same VM goes on (Cloud Hypervisor resets it in-process)
        console.type(b"~r")
        console.wait_for("KCH-GUEST-REBOOT")
        console.wait_for("KCH-GUEST-READY", count=2)
    again = node_cluster.wait_for_vmi(NAME, ready=True)
    assert again["metadata"]["uid"] == vmi["metadata"]["uid"]
    assert node_cluster.launcher_pod(again)["metadata"]["uid"] == pod["metadata"]["uid"]
    # the serial log virt-controller's guest-console-log container tails (KubeVirt's virt-tail)
    log = node_cluster.ok("logs", pod["metadata"]["name"], "-c", "guest-console-log")
    assert log.count("KCH-GUEST-READY") == 3, log


def test_virt_handlers_metrics_show_the_vm(node_cluster: NodeCluster):
    """virt-handler's own collectors ask the launcher for the domain's stats (GetDomainStats,
    GetDomainDirtyRateStats) when Prometheus scrapes it: the VMI's vCPU, memory and dirty-rate
    series are there, and virt-handler logs no failed scrape."""
    node_cluster.wait_for_vmi(NAME, ready=True)
    series = [line for line in node_cluster.virt_handler_metrics().splitlines()
              if not line.startswith("#") and f'name="{NAME}"' in line]
    names = {line.split("{", 1)[0] for line in series}
    print("\nvirt-handler's series of the VMI:", " ".join(sorted(names)))
    for wanted in ("kubevirt_vmi_vcpu_seconds_total", "kubevirt_vmi_memory_resident_bytes",
                   "kubevirt_vmi_dirty_rate_bytes_per_second"):
        assert wanted in names, sorted(names)
    assert "failed to scrape metrics" not in node_cluster.node_log("virt-handler")


def test_virtctl_pause_and_unpause(node_cluster: NodeCluster):
    r = node_cluster.virtctl("pause", "vm", NAME)
    assert (r.rc, r.lines) == (0, [f"VMI {NAME} was scheduled to pause"]), r.out
    def paused() -> bool:  # virt-handler sets Paused, then Ready False
        found = conditions(node_cluster.json("get", "vmi", NAME))
        return found.get("Paused") == ("True", "PausedByUser") and found["Ready"][0] == "False"
    node_cluster.wait_for(paused, "the Paused condition")
    (row,) = table(node_cluster.ok("get", "vmi", NAME, "-o", "wide"))
    assert (row["PHASE"], row["READY"], row["PAUSED"]) == ("Running", "False", "True")
    r = node_cluster.virtctl("unpause", "vm", NAME)
    assert (r.rc, r.lines) == (0, [f"VMI {NAME} was scheduled to unpause"]), r.out
    # virt-handler removes Paused and sets Ready in updates of their own
    wait_for_vmi_state(node_cluster, lambda v: "Paused" not in conditions(v) and conditions(v)["Ready"][0] == "True",
                       "the VMI to be unpaused and Ready")
    (row,) = table(node_cluster.ok("get", "vmi", NAME, "-o", "wide"))
    assert (row["PHASE"], row["READY"], row.get("PAUSED")) == ("Running", "True", None)


def test_the_pods_memory_stays_within_the_overhead_the_calculator_requested(node_cluster: NodeCluster,
                                                                           readme_vm: dict[str, Any]):
    """The compute container's cgroup (launcher, VMM, the kernel's memory for them, what the
    guest touched: the tiny guest touches almost none of its 1 GiB) at its peak so far (boot,
    console, soft reboot, guest reboot, virt-handler's scrapes, pause) against the overhead the
    pod mutator put into the memory request. The VMI and pod are the first ones: kubelet evicted
    none of them, so the peak covers the whole story."""
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    pod = node_cluster.launcher_pod(vmi)
    if FIRST:  # the story's first test ran
        assert (vmi["metadata"]["uid"], pod["metadata"]["uid"]) == (FIRST["vmi"], FIRST["pod"]), \
            node_cluster.ok("get", "events", "--field-selector", "type=Warning")
    compute = next(c for c in pod["spec"]["containers"] if c["name"] == "compute")
    overhead = int(pod["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"])
    guest = 1 << 30  # memory.guest: 1Gi in the README's VM
    assert readme_vm["spec"]["template"]["spec"]["domain"]["memory"]["guest"] == "1Gi"
    assert quantity_bytes(compute["resources"]["requests"]["memory"]) == guest + overhead
    assert quantity_bytes(vmi["status"]["memory"]["memoryOverhead"]) == overhead
    cgroup = node_cluster.memory_cgroup(pod, "compute")
    now = int((cgroup / "memory.usage_in_bytes").read_text())
    peak = int((cgroup / "memory.max_usage_in_bytes").read_text())
    kernel = int((cgroup / "memory.kmem.usage_in_bytes").read_text())
    print(f"\ncompute cgroup memory: {now / MiB:.1f} MiB now (kernel {kernel / MiB:.1f} MiB), "
          f"peak {peak / MiB:.1f} MiB; "
          f"overhead requested {overhead / MiB:.1f} MiB (request {(guest + overhead) / MiB:.1f} MiB); "
          f"headroom over the peak {overhead / peak - 1:.0%}")
    assert peak * HEADROOM <= overhead, (peak, overhead)


def test_the_pod_interface_is_virt_handlers_tap_on_its_bridge_and_shows_in_the_status(node_cluster: NodeCluster):
    """virt-handler built the pod's network (phase 1, virt-chroot): `k6t-eth0` and `tap0`, owned
    by 107; the VMM opened that tap, and `status.interfaces` shows the pod interface as
    virt-handler writes it from the Domain: the guest's MAC (the pod's, the VMI has none) and the
    pod's address."""
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    pod = node_cluster.launcher_pod(vmi)
    pod_mac = node_cluster.ok("exec", pod["metadata"]["name"], "-c", "compute", "--",
                              "cat", "/sys/class/net/eth0/address").strip()
    ip = pod["status"]["podIP"]
    assert vmi["status"]["interfaces"] == [{"infoSource": "domain", "ipAddress": ip, "ipAddresses": [ip],
                                            "linkState": "up", "mac": pod_mac, "name": "default",
                                            "podInterfaceName": "eth0", "queueCount": 1}]
    vmm = vmm_pid(node_cluster, pod)
    links = json.loads(node_cluster.ip_in(vmm, "-d", "-j", "link", "show"))
    by_name = {link["ifname"]: link for link in links}
    tap = by_name["tap0"]
    assert tap["master"] == "k6t-eth0" and by_name["k6t-eth0"]["address"] == "02:00:00:00:00:00"
    owner = tap["linkinfo"]["info_data"]
    assert {str(owner["user"]), str(owner["group"])} <= {"107", "qemu"}, owner
    opened = [Path(f"/proc/{vmm}/fdinfo/{fd}").read_text() for fd in os.listdir(f"/proc/{vmm}/fd")]
    assert any(re.search(r"^iff:\s+tap0$", info, re.MULTILINE) for info in opened), "the VMM has no fd on tap0"


def test_the_launchers_dhcp_server_leases_the_guest_its_address_on_virt_handlers_bridge(node_cluster: NodeCluster,
                                                                                        tmp_path: Path):
    """What a Linux guest would ask on the masquerade interface (the tiny guest asks nothing, so a
    DHCP client on a port of the in-pod bridge plays it, with the guest's MAC): the launcher's
    server, listening in the pod as uid 107, offers KubeVirt's masquerade lease, the pod's MTU,
    the pod's name servers and the VMI's name."""
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    pod = node_cluster.launcher_pod(vmi)
    resolv = node_cluster.ok("exec", pod["metadata"]["name"], "-c", "compute", "--", "cat", "/etc/resolv.conf")
    nameservers = [line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")]
    (interface,) = vmi["status"]["interfaces"]
    with node_cluster.guest_port(vmm_pid(node_cluster, pod), "k6t-eth0", interface["mac"]) as netns:
        lease = udhcpc(netns, tmp_path)
    assert lease is not None, node_cluster.ok("logs", pod["metadata"]["name"], "-c", "compute")
    assert (lease["ip"], lease["subnet"], lease["router"], lease["mtu"]) == ("10.0.2.2", "255.255.255.0", "10.0.2.1",
                                                                             "1500")
    assert (lease["dns"].split(), lease["hostname"]) == (nameservers, NAME)


def test_the_backup_hooks_virt_freezer_lets_a_backup_proceed(node_cluster: NodeCluster):
    """What Velero's KubeVirt plugin runs in `compute` around a backup: with no guest agent (none
    on Cloud Hypervisor) it exits 0 without freezing, as upstream's does, and the VM runs on.
    (It runs in the compute cgroup: what it adds to the peak is printed.)"""
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    pod = node_cluster.launcher_pod(vmi)
    peak = node_cluster.memory_cgroup(pod, "compute") / "memory.max_usage_in_bytes"
    before = int(peak.read_text())
    for action in ("--freeze", "--unfreeze"):
        r = node_cluster.kubectl("exec", pod["metadata"]["name"], "-c", "compute", "--", "/usr/bin/virt-freezer",
                                 action, "--name", NAME, "--namespace", "default")
        assert r.rc == 0 and "No guest agent, exiting" in r.out, r.out
    after = int(peak.read_text())
    print(f"\ncompute cgroup peak {before / MiB:.1f} MiB before virt-freezer, {after / MiB:.1f} MiB after")
    (row,) = table(node_cluster.ok("get", "vmi", NAME))
    assert (row["PHASE"], row["READY"]) == ("Running", "True")


def test_virtctl_restart_runs_a_new_vmi(node_cluster: NodeCluster):
    before = node_cluster.wait_for_vmi(NAME, ready=True)["metadata"]["uid"]
    r = node_cluster.virtctl("restart", NAME)
    assert (r.rc, r.lines) == (0, [f"VM {NAME} was scheduled to restart"]), r.out

    vmi = wait_for_vmi_state(node_cluster, lambda v: v["metadata"]["uid"] != before
                             and conditions(v).get("Ready", ("",))[0] == "True", "a new VMI to be Ready", timeout=180)
    node_cluster.wait_for(lambda: len(node_cluster.json("get", "pods", "-l", f"vmi.kubevirt.io/id={NAME}")["items"])
                          == 1, "the old pod to go", timeout=90)
    node_cluster.launcher_pod(vmi)  # one pod: the new VMI's
    wait_for_vm_row(node_cluster, "Running", "True")


def test_virtctl_stop_stops_the_vm_and_its_pod_goes(node_cluster: NodeCluster):
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    r = node_cluster.virtctl("stop", NAME)
    assert (r.rc, r.lines) == (0, [f"VM {NAME} was scheduled to stop"]), r.out
    node_cluster.wait_for(lambda: node_cluster.kubectl("get", "vmi", NAME).rc != 0, "the VMI to go", timeout=90)
    node_cluster.wait_for(lambda: not node_cluster.json("get", "pods", "-l",
                                                        f"kubevirt.io/created-by={vmi['metadata']['uid']}")["items"],
                          "the launcher pod to go", timeout=90)
    wait_for_vm_row(node_cluster, "Stopped", "False")


def test_virtctl_start_runs_it_again(node_cluster: NodeCluster):
    r = node_cluster.virtctl("start", NAME)
    assert (r.rc, r.lines) == (0, [f"VM {NAME} was scheduled to start"]), r.out
    vmi = node_cluster.wait_for_vmi(NAME, ready=True)
    compute = next(c for c in node_cluster.launcher_pod(vmi)["spec"]["containers"] if c["name"] == "compute")
    assert compute["image"] == LAUNCHER_IMAGE
    errors, log = launcher_log_errors(node_cluster, node_cluster.launcher_pod(vmi))
    assert errors == [], log
    wait_for_vm_row(node_cluster, "Running", "True")

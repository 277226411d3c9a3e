"""KubeVirt's own virt-handler code (`../shared/tools/kubevirt-probe`) playing one story against a
real ch-launcher, in a pod-like directory laid out here.

The probe (see `../shared/tools/README.md`) is built from KubeVirt at d923fdb815cd: it starts the
launcher command given after `--`, finds its socket with `cmdclient.FindSocket`, runs the notify
server behind the real pipe, decodes every Domain with unknown fields refused, computes
virt-handler's phase, runs virt-handler's Prometheus collectors, and prints one line per call and
event, then `==== N discrepancies flagged by chprobe ====` and the list. Exit status 0: no
discrepancy; 3: discrepancies; 1 or 2: the story could not run.

The layout is the one virt-handler and kubelet give a launcher pod (as `../shared/tools/probe-run.sh`
lays it out): `<root>/pods/<pod-uid>/volumes/kubernetes.io~empty-dir` is the share directory
(`FindSocket` looks there), one sparse image per containerDisk volume at
`<container-disk-dir>/disk_<volume index>.img` and per filesystem PVC at
`<private-dir>/vmi-disks/<volume>/disk.img`. In a `PodSandbox` the launcher runs as the compute
container (uid 107, only NET_BIND_SERVICE, the pod's network namespace) and the pod's files and
the notify pipe's socket belong to 107, as kubelet (fsGroup) and virt-handler arrange.

`run_probe` never leaves a process or a directory behind, also on a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.functional.pod_sandbox import PodSandbox

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
UNPACK = SHARED / "unpack.sh"
POD_UID_DIR = "p1"
NAME, NAMESPACE, UID = "vmi-probe", "default", "6b1e4c43-1d8e-4f43-9f0e-0c6b0d8d2e11"
GRACE = 5
_SUMMARY = re.compile(r"^==== (\d+) discrepancies flagged by chprobe ====$", re.MULTILINE)
_CMD_ERROR = re.compile(r"^\[[ \d.]+s\] cmd (.+?)\s+ERROR \(\d+ms\): (.*)$", re.MULTILINE)
_REFUSAL = re.compile(r"(\w+) is not supported by the Cloud Hypervisor backend: ")


def probe_binary() -> str | None:
    """The probe's path (`../shared/unpack.sh tools/kubevirt-probe`), or None without ../shared."""
    if not (SHARED / "tools" / "kubevirt-probe.xz").exists() or not UNPACK.exists():
        return None
    done = subprocess.run([str(UNPACK), "tools/kubevirt-probe"], capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise RuntimeError(f"../shared/unpack.sh tools/kubevirt-probe failed: {done.stderr.strip()}")
    return done.stdout.strip().splitlines()[-1]


@dataclass
class ProbeRun:
    """What one story printed, and what the launcher logged."""

    scenario: str
    returncode: int
    output: str
    launcher_log: str
    seen: dict[str, Any] = field(default_factory=dict)  # CHPROBE_OUT: the VMI and Domains the probe saw
    vmm_log: str = ""  # the last VMM's own log (--log-file), for a report

    @property
    def discrepancies(self) -> list[str]:
        match = _SUMMARY.search(self.output)
        if match is None:
            return []
        return [line[3:] for line in self.output[match.end():].splitlines() if line.startswith(" - ")]

    @property
    def kubevirt_errors(self) -> list[str]:
        """Error-level log lines of KubeVirt's own code (virt-handler logs them as JSON)."""
        errors = []
        for line in self.output.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    if json.loads(line).get("level") == "error":
                        errors.append(line)
        return errors

    @property
    def failed_calls(self) -> list[tuple[str, str]]:
        """(call, error) of every Cmd call KubeVirt's client saw fail."""
        return _CMD_ERROR.findall(self.output)

    def line(self, prefix: str) -> str:
        """The text after the timestamp of the first line starting with `prefix` ("" if none)."""
        for line in self.output.splitlines():
            text = line.split("] ", 1)[-1].lstrip()
            if text.startswith(prefix):
                return text
        return ""

    def report(self, tail: int = 120) -> str:
        out = "\n".join(self.output.splitlines()[-tail:])
        log = "\n".join(self.launcher_log.splitlines()[-40:])
        vmm = "\n".join(self.vmm_log.splitlines()[-30:])
        return (f"probe {self.scenario} exited {self.returncode}\n{out}\n--- launcher log (last lines) ---\n{log}"
                f"\n--- the last VMM's log (last lines) ---\n{vmm}")


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat = Path(f"/proc/{entry}/stat").read_text()
                children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _own_socket_when_it_appears(path: Path, uid: int, stop: threading.Event) -> None:
    """virt-handler gives the notify pipe's socket to the pod's user; it appears once the probe's
    notify server runs (the probe starts the launcher right after)."""
    deadline = time.monotonic() + 30
    while not stop.is_set() and time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError):
            os.chown(path, uid, uid)
            return
        stop.wait(0.01)


def run_probe(scenario: str, *, probe: str, ch_binary: str, firmware: Path | None = None,
              vmi: dict[str, Any] | None = None, pod: PodSandbox | None = None,
              env: dict[str, str] | None = None, timeout: float = 240.0) -> ProbeRun:
    """Play `scenario` against a ch-launcher running `ch_binary` (firmware: a directory holding
    hypervisor-fw and/or CLOUDHV.fd; else placeholders for the simulated VMM), with the probe's
    built-in VMI or `vmi`, as root on this host or in `pod`. `env` adds to the environment of the
    probe, the launcher and the VMM (FAKE_CH_*, CHPROBE_*). Raises TimeoutError after `timeout`."""
    if pod is not None:
        root = Path(tempfile.mkdtemp(prefix="pr", dir=pod.root))
    else:
        root = Path(tempfile.mkdtemp(prefix="kpr", dir="/tmp"))
    try:
        return _run(root, scenario, probe, ch_binary, firmware, vmi, pod, env or {}, timeout)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _run(root: Path, scenario: str, probe: str, ch_binary: str, firmware: Path | None,
         vmi: dict[str, Any] | None, pod: PodSandbox | None, extra_env: dict[str, str], timeout: float) -> ProbeRun:
    share = root / "pods" / POD_UID_DIR / "volumes" / "kubernetes.io~empty-dir"
    dirs = {name: root / name for name in ("handler", "private", "ephemeral", "cdisks", "hotplug", "firmware", "out")}
    for d in [*dirs.values(), share / "sockets"]:
        d.mkdir(parents=True, exist_ok=True)
    if firmware is not None:
        for item in firmware.iterdir():
            shutil.copyfile(item, dirs["firmware"] / item.name)
    else:
        for name in ("hypervisor-fw", "CLOUDHV.fd"):
            (dirs["firmware"] / name).write_bytes(bytes(4096))
    # the probe's own VMI: a containerDisk (volume 0) and cloud-init
    volumes = vmi.get("spec", {}).get("volumes") or [] if vmi is not None else [{"containerDisk": {}}]
    for index, volume in enumerate(volumes):
        image = None
        if "containerDisk" in volume:  # what virt-handler mounts for containerDisk volume <index>
            image = dirs["cdisks"] / f"disk_{index}.img"
        elif "persistentVolumeClaim" in volume or "dataVolume" in volume:  # kubelet's mount of a filesystem PVC
            image = dirs["private"] / "vmi-disks" / volume["name"] / "disk.img"
        if image is not None:
            image.parent.mkdir(parents=True, exist_ok=True)
            with open(image, "wb") as f:
                f.truncate(64 << 20)
    args = ["-share", str(share), "-pods-base", str(root / "pods"), "-pod-uid", POD_UID_DIR,
            "-handler", str(dirs["handler"]), "-name", NAME, "-namespace", NAMESPACE, "-uid", UID,
            "-grace", str(GRACE), "-scenario", scenario, "-launcher-log", str(root / "launcher.log")]
    if vmi is not None:
        (root / "vmi.json").write_text(json.dumps(vmi))
        args += ["-vmi", str(root / "vmi.json")]
    launcher = [sys.executable, "-m", "ch_launcher.cli", "--qemu-timeout", "60s", "--name", NAME, "--uid", UID,
                "--namespace", NAMESPACE, "--kubevirt-share-dir", str(share),
                "--ephemeral-disk-dir", str(dirs["ephemeral"]), "--container-disk-dir", str(dirs["cdisks"]),
                "--hotplug-disk-dir", str(dirs["hotplug"]), "--grace-period-seconds", str(GRACE + 15),
                "--hook-sidecars", "0", "--private-dir", str(dirs["private"]),
                "--firmware-dir", str(dirs["firmware"]), "--ch-binary", ch_binary]
    if pod is not None:
        pod.vif_cache(dirs["private"])  # virt-handler's DHCP caches of bridge bindings
        pod.own(root)
        launcher = pod.command(launcher)
    env = {**os.environ, "PYTHONPATH": str(REPO), "CHPROBE_OUT": str(dirs["out"]), "KCH_ROOT": str(root),
           **extra_env}
    stop = threading.Event()
    owner = None
    if pod is not None:
        owner = threading.Thread(target=_own_socket_when_it_appears,
                                 args=(share / "domain-notify-pipe.sock", pod.uid, stop), daemon=True)
        owner.start()
    proc = subprocess.Popen([probe, *args, "--", *launcher], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, cwd=str(REPO), start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *_descendants(proc.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        output, _ = proc.communicate()
        log = (root / "launcher.log").read_text(errors="replace") if (root / "launcher.log").exists() else ""
        tail = "\n".join(output.decode(errors="replace").splitlines()[-60:])
        raise TimeoutError(f"probe {scenario} still running after {timeout:.0f} s\n{tail}\n--- launcher log ---\n"
                           f"{log[-4000:]}") from None
    finally:
        stop.set()
        if owner is not None:
            owner.join(5)
        for pid in _descendants(proc.pid):  # nothing the story started may outlive it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    log_path = root / "launcher.log"
    vmm_log = dirs["private"] / "ch" / "ch.log"
    seen = {}
    for item in sorted(dirs["out"].glob("*.json")):
        with contextlib.suppress(ValueError):
            seen[item.stem] = json.loads(item.read_text())
    return ProbeRun(scenario, proc.returncode, output.decode(errors="replace"),
                    log_path.read_text(errors="replace") if log_path.exists() else "", seen,
                    vmm_log.read_text(errors="replace") if vmm_log.exists() else "")


# Calls the probe makes that virt-handler makes only for a VMI that asks for them, failing in band
# for one that does not (all @d923fdb815cd):
# - SyncVirtualMachineMemory without maxGuest: virt-handler sends it only for a memory hotplug,
#   which needs maxGuest (virt-launcher's BuildMemoryDevice would dereference the nil maxGuest,
#   kubevirt pkg/liveupdate/memory/memory.go);
# - MigrateVirtualMachine of a VMI whose migrationState is not ready: virt-launcher's own refusal
#   and text (pkg/virt-launcher/virtwrap/live-migration-source.go);
# - FinalizeVirtualMachineMigration in a pod no migration came into: virt-handler sends it to the
#   target pod of a completed migration only (pkg/virt-handler/migration-target.go);
# - FreezeVirtualMachine / UnfreezeVirtualMachine, GuestPing, Exec: the snapshot controller freezes
#   only VMIs with the AgentConnected condition (pkg/storage/snapshot/source.go), and the probes
#   are only those a VMI asks for; a guest that runs no agent (the probe's own VMI, the tiny guest)
#   gets what virt-launcher answers without a connected agent (LibvirtError Code=86).
EXPECTED_FAILURES = (
    ("FreezeVirtualMachine", "QEMU guest agent is not connected"),
    ("UnfreezeVirtualMachine", "QEMU guest agent is not connected"),
    ("GuestPing", "QEMU guest agent is not connected"),
    ("Exec", "QEMU guest agent is not connected"),
    ("SyncVirtualMachineMemory", "without room for memory hotplug (spec.domain.memory.maxGuest)"),
    ("MigrateVirtualMachine", "cannot migrate VMI until migrationState is ready"),
    ("FinalizeVirtualMachineMigration", "no migration has completed into this pod"),
)


def refusal_problems(run: ProbeRun, not_served: set[str]) -> list[str]:
    """Failed Cmd calls that are not a refusal the launcher declares (server.NOT_SERVED) or an
    EXPECTED_FAILURES one, except calls after DeleteDomain that find the launcher gone: it exits
    then, as virt-launcher does. A call that reaches the server while it stops is cancelled
    (gRPC Canceled, which virt-handler's cmd-client counts as a disconnect: `IsDisconnected`,
    pkg/virt-handler/cmd-client/errors.go@d923fdb815cd); one after it has stopped is Unavailable."""
    problems = []
    for call, error in run.failed_calls:
        refused = _REFUSAL.search(error)
        if refused and refused.group(1) in not_served:
            continue
        if any(call.startswith(rpc) and text in error for rpc, text in EXPECTED_FAILURES):
            continue
        if "(after DeleteDomain)" in call and ("code = Unavailable" in error or "code = Canceled" in error):
            continue
        problems.append(f"{call}: {error}")
    return problems

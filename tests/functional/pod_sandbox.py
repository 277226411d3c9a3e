"""A launcher pod's privileges and network, reproduced on one machine for the real-VMM tests.

What the compute container of a KubeVirt launcher pod gives ch-launcher and cloud-hypervisor,
and how it is reproduced here (facts from `kubevirt/kubevirt @d923fdb815cd`):

- **User and capabilities.** A non-root VMI's compute container runs as uid/gid 107
  (`pkg/virt-controller/services/template.go`: `computePodSecurityContext`; `rendercontainer.go`:
  `securityContext` sets runAsUser/runAsGroup 107 and `allowPrivilegeEscalation: false`), with
  `capabilities: {drop: [ALL], add: [NET_BIND_SERVICE]}` (`requiredCapabilities`,
  `WithDropALLCapabilities`). The container runtime therefore starts the entrypoint with bounding,
  permitted and effective sets {NET_BIND_SERVICE}, no inheritable or ambient capability, and
  no_new_privs. A non-root process loses permitted capabilities at execve unless the file it
  executes carries them: KubeVirt puts `cap_net_bind_service` on `virt-launcher-monitor` as a file
  capability (`cmd/virt-launcher/BUILD.bazel`: `xattrs`), which then hands it to virt-launcher as
  an *ambient* capability (`cmd/virt-launcher-monitor/virt-launcher-monitor.go`: `AmbientCaps`).
  ch-launcher's image (`Containerfile`) puts `cap_net_bind_service=+ep` on the Python interpreter
  instead, with no ambient set, so the launcher holds NET_BIND_SERVICE and the cloud-hypervisor
  it executes holds no capability at all.
  Reproduced with `setpriv --reuid 107 --regid 107 --clear-groups --bounding-set
  -all,+net_bind_service --no-new-privs` executing a copy of this interpreter that carries the
  file capability `cap_net_bind_service=+ep` (`setcap`). The result is checked at start
  (`check_privileges`): the launcher has exactly NET_BIND_SERVICE, its children none.
- **Network.** virt-handler builds the pod's network before the first Sync, as root in the pod's
  network namespace (`pkg/network/setup/netpod/netpod.go`): masquerade: the in-pod bridge
  `k6t-eth0` (MAC 02:00:00:00:00:00, the pod MTU, 10.0.2.1/24) and the tap; bridge: the pod link
  renamed `<name>-nic` and enslaved, a dummy keeping the pod's name, MAC and address, the bridge
  with 169.254.75.1<i>/32, virt-handler's DHCP cache file; every tap is created by
  `virt-chroot create-tap` (`cmd/virt-chroot/tap-device-maker.go`): owner and group 107,
  `vnet_hdr`, `multi_queue` when it has more than one queue, the pod MTU, up, enslaved to the
  bridge. Reproduced in a fresh network namespace (`ip netns add`, named with the pid) with
  `ip` as root; the launcher runs under `ip netns exec`, which also remounts `/sys`, so
  `/sys/class/net` lists the namespace's links. Pod links are veths with a dangling peer (not
  every kernel has dummy links). A guest stand-in (`guest_port`): a veth enslaved to the bridge
  whose peer, in a second namespace, carries the guest's MAC, for busybox `udhcpc`.
- **Devices.** The device plugins (`pkg/virt-handler/device-manager/device_controller.go`:
  `PermanentHostDevicePlugins`) hand the host's `/dev/kvm` and `/dev/net/tun` to the container
  with the host's owner and mode; `/dev/net/tun` is 0666 on most distributions and virt-handler's
  node labeller makes `/dev/kvm` o+rw (`cmd/virt-launcher/node-labeller/node-labeller.sh`).
  Before the first Sync of a non-root VMI virt-handler chowns them to 107 in the compute container
  (`nonRootSetup`: `/dev/kvm`, `/dev/net/tun`, and `/dev/vhost-net` for a virtio NIC, where the pod
  mutator puts an empty directory), so on a node whose nodes are 0600 (the test node of
  tests/cluster) the launcher starts before its VMM may open `/dev/kvm`. Reproduced without
  touching the host's nodes: the launcher's mount namespace (the one `ip netns exec` creates)
  gets a container's `/dev` (a tmpfs with null, zero, full, random, urandom, tty, pts, shm),
  nodes of the same numbers as the host's kvm and net/tun (mode 0666, or `kvm_mode` and
  `tun_mode`, owned by root; `vhost_net_placeholder`: the mutator's directory), the pod's block
  PVCs at `/dev/<volume>` (loop devices, owned by 107: `block_device`); `claim_devices(pid)` does
  virt-handler's chown in the mount namespace of a running process of the pod.
- **Files.** `/etc/resolv.conf` is the pod's (kubelet's, bind-mounted). The pod's directories
  (share dir, private dir, disks) are the pod's, owned by 107 (`own`). Paths of this machine
  the launcher needs but 107 cannot reach (an interpreter under a 0700 home directory) are made
  reachable in the launcher's mount namespace only: the blocking directory is covered by a tmpfs
  holding bind mounts of just the needed entries.

Everything lives under one short temporary root. `close()` (also on failure, and idempotent)
kills every process left in the namespaces, deletes them, detaches the loop devices it attached
and removes the root; the mounts live only in the launchers' own mount namespaces. What a test
process killed before `close()` left (its names carry its pid) is swept by the next sandbox.

Needs root, `ip` (iproute2), `setpriv` (util-linux) and `setcap` (libcap2-bin);
`missing_requirements()` says what is absent.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import site
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.functional.pod_probes import POD_UID, go_dhcp_config
from tests.netns import kill_processes_in, pid_alive, sweep_stale_namespaces

MASQUERADE_BRIDGE_MAC = "02:00:00:00:00:00"  # link.StaticMasqueradeBridgeMAC
POD_MAC = "0a:58:0a:f4:01:05"
REPO = Path(__file__).resolve().parents[2]
DEVICES = ("/dev/kvm", "/dev/net/tun")
# kubelet's resolv.conf for a pod in namespace "default" (ClusterFirst DNS policy)
POD_RESOLV_CONF = ("search default.svc.cluster.local svc.cluster.local cluster.local\n"
                   "nameserver 10.96.0.10\noptions ndots:5\n")


def missing_requirements() -> str | None:
    """Why a sandbox cannot be built here (for a skip reason), or None."""
    if os.geteuid() != 0:
        return "needs root to build a pod sandbox (network namespaces, taps, setpriv); CI runs as root"
    for tool, package in (("ip", "iproute2"), ("setpriv", "util-linux"), ("setcap", "libcap2-bin")):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make test` installs it as root)"
    return None


def run(*args: str, check: bool = True, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{shlex.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done


_STALE = re.compile(r"^(?:kcpod|kcvm)(\d+)x[0-9a-f]{6}\d*$")


def sweep_stale_sandboxes() -> None:
    """Remove what sandboxes of test processes that died without `close()` (SIGKILL, a killed
    pytest) left: their namespaces (and the processes in them), loop devices and directories.
    Only names of this module's scheme, whose creating pid is gone, are touched."""
    sweep_stale_namespaces(_STALE)
    stale_roots = [d for d in Path("/tmp").glob("kp*x*") if (m := re.match(r"^kp(\d+)x", d.name))
                   and d.is_dir() and not pid_alive(int(m.group(1)))]
    if not stale_roots:
        return
    loops = run("losetup", "--noheadings", "--output", "NAME,BACK-FILE", "--list", check=False).stdout
    for line in loops.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and any(parts[1].startswith(f"{root}/") for root in stale_roots):
            run("losetup", "-d", parts[0], check=False)
    for root in stale_roots:
        shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True)
class Tap:
    name: str
    mtu: int
    queues: int
    bridge: str


class PodSandbox:
    """One launcher pod: its network namespace, its devices, its user, its files.

    Use as a context manager or call `close()`. Build the network with `masquerade`, `bridge`,
    `tap`, ...; run programs as the compute container with `command(argv)` (a ready argv for
    Popen) or `python_command(args)` (this interpreter, file-capable). Every method raises
    RuntimeError naming the command that failed.
    """

    def __init__(self, *, uid: int = POD_UID, umask: int = 0o022, resolv_conf: str = POD_RESOLV_CONF,
                 file_capability: bool = True, kvm_mode: int = 0o666, tun_mode: int = 0o666,
                 vhost_net_placeholder: bool = False) -> None:
        self.uid = uid
        # 0o600: a node whose nodes are root's alone (until virt-handler's claim_devices), or a
        # pod the kvm device plugin was not allocated to (no claim ever comes)
        self.kvm_mode = kvm_mode
        self.tun_mode = tun_mode
        self.vhost_net_placeholder = vhost_net_placeholder  # the pod mutator's directory at /dev/vhost-net
        self.file_capability = file_capability  # False: an image whose interpreter lacks setcap
        self.resolv_conf = resolv_conf
        self.umask = umask
        sweep_stale_sandboxes()
        self.tag = f"{os.getpid()}x{os.urandom(3).hex()}"
        self.netns = f"kcpod{self.tag}"
        self.root = Path(tempfile.mkdtemp(prefix=f"kp{os.getpid()}x", dir="/tmp"))
        self._namespaces: list[str] = []
        self._loops: list[str] = []
        self._block_devices: dict[str, int] = {}  # /dev/<name> -> device number
        self.taps: list[Tap] = []
        self.binds: list[tuple[str, str]] = []  # (host path, path in the pod): `bind`
        self.bridge_leases: dict[str, dict[str, Any]] = {}  # pod interface -> virt-handler's DHCP cache
        self._closed = False
        try:
            os.chmod(self.root, 0o755)
            run("ip", "netns", "add", self.netns)
            self._namespaces.append(self.netns)
            self.ip("link", "set", "lo", "up")
            self._python = self._capable_python()
        except BaseException:
            self.close()
            raise

    # --- lifetime ------------------------------------------------------------------------

    def __enter__(self) -> PodSandbox:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill what runs in the namespaces, delete them, detach loop devices, remove the root."""
        if self._closed:
            return
        self._closed = True
        for name in self._namespaces:
            kill_processes_in(name)
        for name in reversed(self._namespaces):
            run("ip", "netns", "del", name, check=False)
        for loop in self._loops:
            run("losetup", "-d", loop, check=False)
        shutil.rmtree(self.root, ignore_errors=True)

    # --- files -------------------------------------------------------------------------------

    def bind(self, source: os.PathLike[str] | str, target: os.PathLike[str] | str) -> None:
        """Show `source` at `target` in the launcher's mount namespace (an existing directory):
        a pod's files at the paths another pod has them too, as in two pods on two nodes (the
        migration stories: the VM config the target receives names the source pod's paths)."""
        self.binds.append((str(source), str(target)))

    def own(self, *paths: os.PathLike[str] | str) -> None:
        """chown -R to the pod's user: the pod's directories and files belong to it."""
        for top in paths:
            os.chown(top, self.uid, self.uid, follow_symlinks=False)
            if os.path.isdir(top) and not os.path.islink(top):
                for parent, dirs, files in os.walk(top):
                    for name in dirs + files:
                        os.chown(os.path.join(parent, name), self.uid, self.uid, follow_symlinks=False)

    def block_device(self, name: str, image: os.PathLike[str] | str) -> str:
        """A block PVC: `image` on a free loop device (detached at close), shown to the pod as
        `/dev/<name>` (kubelet's volumeDevices path for KubeVirt), owned by 107, in the /dev of
        programs started after this call. Returns the loop device."""
        loop = run("losetup", "--find", "--show", str(image)).stdout.strip()
        self._loops.append(loop)
        self._block_devices[name] = os.stat(loop).st_rdev
        return loop

    # --- network (what virt-handler creates, as root) ---------------------------------------

    def ip(self, *args: str) -> str:
        return run("ip", "-n", self.netns, *args).stdout

    def link(self, name: str, *, mtu: int, mac: str | None = None, up: bool = True) -> None:
        """A pod link (a veth whose peer stays in the pod unused)."""
        peer = "p" + hashlib.sha256(name.encode()).hexdigest()[:10]
        self.ip("link", "add", name, "mtu", str(mtu), *(("address", mac) if mac else ()),
                "type", "veth", "peer", "name", peer, "mtu", str(mtu))
        if up:
            self.ip("link", "set", name, "up")

    def tap(self, name: str, *, bridge: str, mtu: int, queues: int = 1, owner: int | None = None,
            up: bool = True) -> Tap:
        """`virt-chroot create-tap`: owner/group 107, vnet_hdr, multi_queue if queues > 1, MTU,
        then enslaved to the bridge and set up (netpod.go's tap spec)."""
        uid = self.uid if owner is None else owner
        self.ip("tuntap", "add", "dev", name, "mode", "tap", "user", str(uid), "group", str(uid), "vnet_hdr",
                *(("multi_queue",) if queues > 1 else ()))
        self.ip("link", "set", name, "mtu", str(mtu), "master", bridge, *(("up",) if up else ()))
        tap = Tap(name, mtu, queues, bridge)
        self.taps.append(tap)
        return tap

    def masquerade(self, pod_interface: str = "eth0", *, tap: str = "tap0", mtu: int = 1400,
                   mac: str = POD_MAC, address: str = "10.244.1.5/24", gateway_cidr: str = "10.0.2.1/24",
                   queues: int = 1) -> Tap:
        """netpod.go `masqueradeBindingSpec`: the pod link, `k6t-<name>` with the reserved MAC,
        the pod MTU and the VM network's gateway address, and the tap."""
        bridge = "k6t-" + pod_interface.removeprefix("pod")
        self.link(pod_interface, mtu=mtu, mac=mac)
        self.ip("addr", "add", address, "dev", pod_interface)
        self.ip("link", "add", bridge, "mtu", str(mtu), "address", MASQUERADE_BRIDGE_MAC, "type", "bridge")
        self.ip("addr", "add", gateway_cidr, "dev", bridge)
        self.ip("link", "set", bridge, "up")
        return self.tap(tap, bridge=bridge, mtu=mtu, queues=queues)

    def bridge(self, pod_interface: str = "eth0", *, tap: str = "tap0", index: int = 0, mtu: int = 1450,
               mac: str = POD_MAC, ip: str = "10.244.1.5", prefix: int = 24, gateway: str = "10.244.1.1",
               queues: int = 1, ipam: bool = True) -> Tap:
        """netpod.go `bridgeBindingSpec`: the pod link renamed `<name>-nic` and enslaved to
        `k6t-<name>` (with 169.254.75.1<index>/32 when the pod had an address), a stand-in
        keeping the pod's name, MAC and address, the tap, and virt-handler's DHCP cache
        `<private>/vif-cache-<name>.json` (written by `vif_cache`)."""
        trimmed = pod_interface.removeprefix("pod")
        bridge, nic = f"k6t-{trimmed}", f"{trimmed}-nic"
        self.link(pod_interface, mtu=mtu, mac=mac)
        if ipam:
            self.ip("addr", "add", f"{ip}/{prefix}", "dev", pod_interface)
        self.ip("link", "add", bridge, "mtu", str(mtu), "type", "bridge")
        if ipam:
            self.ip("addr", "add", f"169.254.75.1{index}/32", "dev", bridge)
        self.link(nic, mtu=mtu, up=False)
        self.ip("link", "set", nic, "master", bridge, "up")
        self.ip("link", "set", bridge, "up")
        self.bridge_leases[pod_interface] = go_dhcp_config(pod_interface, ip, prefix, gateway, mac, mtu)
        return self.tap(tap, bridge=bridge, mtu=mtu, queues=queues)

    def vif_cache(self, private_dir: os.PathLike[str] | str) -> None:
        """Write virt-handler's bridge-binding caches into the launcher's private dir (as 107's)."""
        for name, config in self.bridge_leases.items():
            path = Path(private_dir) / f"vif-cache-{name}.json"
            path.write_text(json.dumps(config))
            self.own(path)

    def guest_port(self, bridge: str, mac: str, *, name: str = "eth0") -> str:
        """A stand-in for the guest's NIC for DHCP: a veth enslaved to `bridge`, its peer `name`
        with the guest's MAC in a namespace of its own. Returns that namespace."""
        guest = f"kcvm{self.tag}{len(self._namespaces)}"
        run("ip", "netns", "add", guest)
        self._namespaces.append(guest)
        run("ip", "-n", guest, "link", "set", "lo", "up")
        port = f"g{len(self._namespaces)}{self.tag[-6:]}"
        self.ip("link", "add", port, "type", "veth", "peer", "name", name, "netns", guest)
        self.ip("link", "set", port, "master", bridge, "up")
        run("ip", "-n", guest, "link", "set", name, "address", mac, "up")
        return guest

    # --- privileges ---------------------------------------------------------------------------

    def _dev_lines(self) -> list[str]:
        """A container's /dev (a tmpfs with the usual nodes) plus the device plugins' nodes as
        the host has them (mode 0666) and the pod's block volumes (`block_device`)."""
        q = shlex.quote
        lines = ["mount -t tmpfs -o mode=0755,size=256k,nosuid kcdev /dev", "mkdir /dev/net /dev/pts /dev/shm",
                 "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts /dev/pts",
                 "ln -s pts/ptmx /dev/ptmx", "ln -s /proc/self/fd /dev/fd", "mount -t tmpfs -o mode=1777 shm /dev/shm"]
        for i, name in enumerate(("stdin", "stdout", "stderr")):
            lines.append(f"ln -s /proc/self/fd/{i} /dev/{name}")
        nodes = [(name, (1, minor), 0o666, 0) for name, minor in
                 (("null", 3), ("zero", 5), ("full", 7), ("random", 8), ("urandom", 9))]
        nodes.append(("tty", (5, 0), 0o666, 0))
        for path in DEVICES:
            with contextlib.suppress(FileNotFoundError):
                rdev = os.stat(path).st_rdev
                mode = self.kvm_mode if path == "/dev/kvm" else self.tun_mode
                nodes.append((path.removeprefix("/dev/"), (os.major(rdev), os.minor(rdev)), mode, 0))
        for name, (major, minor), mode, _ in nodes:
            lines.append(f"mknod -m {mode:o} /dev/{name} c {major} {minor}")
        if self.vhost_net_placeholder:
            lines.append("mkdir -m 2777 /dev/vhost-net")  # an emptyDir (fsGroup 107's setgid bit)
        for name, rdev in self._block_devices.items():
            lines.append(f"mknod -m 660 {q('/dev/' + name)} b {os.major(rdev)} {os.minor(rdev)}")
            lines.append(f"chown {self.uid}:{self.uid} {q('/dev/' + name)}")
        return lines

    def _capable_python(self) -> Path:
        """A copy of this interpreter carrying `cap_net_bind_service=+ep`, in a virtual
        environment whose site-packages is this one's."""
        venv = self.root / "py"
        (venv / "bin").mkdir(parents=True)
        python = venv / "bin" / "python3"
        real = os.path.realpath(sys.executable)
        shutil.copy2(real, python)
        os.chmod(python, 0o755)
        if self.file_capability:
            run("setcap", "cap_net_bind_service=+ep", str(python))
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        (venv / "pyvenv.cfg").write_text(f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\n"
                                         f"version = {sys.version_info.major}.{sys.version_info.minor}."
                                         f"{sys.version_info.micro}\n")
        lib = venv / "lib" / version
        lib.mkdir(parents=True)
        packages = [p for p in site.getsitepackages() if os.path.isdir(p)]
        if sys.prefix != sys.base_prefix and packages:
            (lib / "site-packages").symlink_to(packages[0])
        return python

    def _reachable(self, paths: Iterable[str]) -> dict[str, set[str]]:
        """Directories on the way to `paths` that others cannot search -> the entries needed."""
        blocked: dict[str, set[str]] = {}
        for path in paths:
            parts = Path(os.path.realpath(path)).parts
            for depth in range(1, len(parts)):
                directory = os.path.join(*parts[:depth])
                with contextlib.suppress(OSError):
                    if not os.stat(directory).st_mode & stat.S_IXOTH:
                        blocked.setdefault(directory, set()).add(parts[depth])
        return blocked

    def needed_paths(self) -> list[str]:
        paths = [sys.base_prefix, sys.prefix, sysconfig.get_paths()["stdlib"], str(REPO),
                 os.path.realpath(sys.executable)]
        libdir = sysconfig.get_config_var("LIBDIR")
        if libdir:
            paths.append(libdir)
        binary = os.environ.get("CH_BINARY") or str(REPO.parent / "shared" / "vmm" / "cloud-hypervisor")
        paths.append(binary)
        return paths

    def _write_init(self) -> Path:
        """The script `ip netns exec` runs as root in the launcher's fresh mount namespace before
        becoming the compute container's process (rewritten for each command: block devices
        may have been added)."""
        q = shlex.quote
        lines = ["set -e", *self._dev_lines()]
        resolv = self.root / "resolv.conf"  # kubelet mounts the pod's own
        resolv.write_text(self.resolv_conf)
        lines.append(f"mount --bind {q(str(resolv))} /etc/resolv.conf")
        for source, target in self.binds:
            lines.append(f"mount --bind {q(source)} {q(target)}")
        stage = self.root / "stage"
        stage.mkdir(mode=0o700, exist_ok=True)
        for i, (directory, entries) in enumerate(sorted(self._reachable(self.needed_paths()).items())):
            held = stage / str(i)
            held.mkdir(exist_ok=True)
            lines.append(f"mount --bind {q(directory)} {q(str(held))}")
            lines.append(f"mount -t tmpfs -o mode=0711,size=64k kcpod {q(directory)}")
            for entry in sorted(entries):
                target, source = os.path.join(directory, entry), str(held / entry)
                make = "mkdir" if os.path.isdir(os.path.join(directory, entry)) else "touch"
                lines.append(f"{make} {q(target)}")
                lines.append(f"mount --bind {q(source)} {q(target)}")
        lines.append(f"umask {self.umask:03o}")
        lines.append("export FAKE_CH_CHECK_KVM=1")  # the simulated VMM opens /dev/kvm as CH does
        lines.append(f"exec setpriv --reuid {self.uid} --regid {self.uid} --clear-groups "
                     f"--bounding-set -all,+net_bind_service --no-new-privs -- \"$@\"")
        init = self.root / f"pod-init-{len(self._block_devices)}.sh"
        init.write_text("\n".join(lines) + "\n")
        return init

    @property
    def python(self) -> str:
        """The interpreter with the file capability (as ch-launcher's image has it)."""
        return str(self._python)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` as the compute container runs it: in the pod's network namespace, its own
        mount namespace with the devices, as 107 with only what execve grants (see above).
        `sys.executable` as argv[0] is replaced by the file-capable interpreter."""
        argv = list(argv)
        if argv and argv[0] == sys.executable:
            argv[0] = self.python
        return ["ip", "netns", "exec", self.netns, "sh", str(self._write_init()), *argv]

    def python_command(self, args: Sequence[str]) -> list[str]:
        return self.command([self.python, *args])

    def claim_devices(self, pid: int) -> None:
        """What virt-handler's nonRootSetup does before a non-root VMI's first Sync: chown the
        compute container's /dev/kvm, /dev/net/tun and (with a NIC) /dev/vhost-net to the pod's
        user, in the mount namespace of `pid` (a process of the pod)."""
        paths = ["/dev/kvm", "/dev/net/tun"] + (["/dev/vhost-net"] if self.vhost_net_placeholder else [])
        run("nsenter", "-t", str(pid), "-m", "chown", f"{self.uid}:{self.uid}", *paths)

    def exec_as_root(self, *argv: str, timeout: float = 20) -> subprocess.CompletedProcess[str]:
        """Run a command as root in the pod's network namespace (virt-handler's side)."""
        return run("ip", "netns", "exec", self.netns, *argv, timeout=timeout)



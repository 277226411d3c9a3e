"""A real single-node cluster running kubevirt-ch as a user installs it, for the cluster suite.

`NodeCluster` is the control plane of `tests/apiserver/cluster.py` (up.sh in a network namespace
of its own, KubeVirt's CRDs, its CR and virt-api) plus a real node: `../shared/k8s/node-up.sh`
(containerd, runc, kubelet, kube-scheduler, kube-proxy, KubeVirt's virt-controller and
virt-handler). `start()` sets it up in the order a user would have it:

1. the control plane, with a KubeVirt CR as virt-operator would leave it (imagePullPolicy
   IfNotPresent, as for images that were loaded rather than pulled; the ImageVolume feature gate
   off: containerd 1.6 cannot mount image volumes, so containerDisks run as containers; the
   CPUManager gate on, as a cluster with dedicated-CPU nodes has it);
2. the node, its virt-controller configured with KubeVirt's launcher image name;
3. the images (`images.py`) loaded into the node's containerd with `node-import.sh`, as a
   registry pull leaves them;
4. the README's Install block, run as it stands (`kubectl apply -k addon_manifests/`, then
   `kubectl -n kubevirt-ch rollout status deployment/ch-admission`): ch-admission runs as the pods
   of its Deployment, from the image built from the Containerfile.

The node's scripts run through `nsenter --net` (the namespace's network, the host's mounts), not
`ip netns exec`, which mounts a fresh /sys without the cgroup hierarchies kubelet needs. The run
directory is named after the namespace, so each cluster's cgroup root (`kvch-<run dir>`, the only
state a node leaves on the host while it runs) is its own, and what a killed test run left of it
is swept by the next one. `close()` stops the node (`node-down.sh`), then the control plane.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.apiserver.cluster import EPIP, SHARED_K8S, Cluster, ClusterError, Run
from tests.cluster.images import UNPACK, Archive, Images
from tests.cluster.watch import Watch
from tests.manifests.render import REPO
from tests.netns import pid_alive, sweep_stale_namespaces

# virt-operator's CR for a cluster whose images were loaded onto the nodes (see the module docstring),
# with the feature gate CPUManager: virt-handler labels a node whose kubelet runs the static CPU
# manager `cpumanager=true` only then (tests/cluster/test_dedicated_node.py)
KUBEVIRT_SPEC: dict[str, Any] = {"imagePullPolicy": "IfNotPresent",
                                 "configuration": {"developerConfiguration": {"disabledFeatureGates": ["ImageVolume"],
                                                                              "featureGates": ["CPUManager"]}}}
# virt-handler's --port (defaultPort, cmd/virt-handler/virt-handler.go@d923fdb815cd), where it serves /metrics
VIRT_HANDLER_PORT = 8185
# virtctl built without version ldflags prints this about virt-api's version (../shared/k8s/README.md)
VIRTCTL_NOTICE = "failed to validate metadata: $Format:%h$ is not a valid semver identifier"
NODE_TOOLS = (("containerd", "containerd"), ("ctr", "containerd"), ("runc", "runc"), ("iptables", "iptables"),
              ("nft", "nftables"), ("nsenter", "util-linux"), ("xz", "xz-utils"), ("ip", "iproute2"))
_STALE_CGROUP = re.compile(r"^kvch-kvch-api-(\d+)-\d+$")
_STALE_GUEST = re.compile(r"^kvch-gst-(\d+)-\d+$")  # guest_port's namespaces
_guest_serial = itertools.count(1)


def readme_install() -> list[list[str]]:
    """The commands of the README's Install block (kubectl's arguments), in order."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("\n## Install\n"):]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line.split("#", 1)[0]) for line in block.splitlines() if line.split("#", 1)[0].strip()]
    if not commands or any(c[0] != "kubectl" for c in commands):
        raise ClusterError(f"the README's Install block is not a list of kubectl commands:\n{block}")
    return [c[1:] for c in commands]


def unavailable() -> str | None:
    """Why the node cannot run here (one line, for a skip reason), or None."""
    if not (SHARED_K8S / "node-up.sh").exists():
        return f"{SHARED_K8S} is absent: ../shared is not beside this checkout"
    if os.geteuid() != 0:
        return "needs root (network, mount and PID namespaces, cgroups for the node); CI runs as root"
    for tool, package in NODE_TOOLS:
        if shutil.which(tool) is None:
            return f"{tool} is not installed (Debian package {package}; `make test` installs it as root)"
    if not os.access("/usr/lib/cni/bridge", os.X_OK):
        return "/usr/lib/cni/bridge is not installed (Debian package containernetworking-plugins)"
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return f"/dev/kvm is not usable: {exc.strerror}"
    return None


def sweep_stale_cgroups() -> None:
    """Remove the cgroup roots of nodes whose test process is gone (their processes died with
    the network namespace the control plane's sweep deleted). Only this module's names."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        with contextlib.suppress(OSError):
            for root in hierarchy.iterdir():
                m = _STALE_CGROUP.match(root.name)
                if m and root.is_dir() and not pid_alive(int(m.group(1))):
                    for directory in sorted((d for d in root.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
                        with contextlib.suppress(OSError):
                            directory.rmdir()
                    with contextlib.suppress(OSError):
                        root.rmdir()


class Console:
    """`virtctl console VMI` with a pipe for a terminal: what it prints, and keys typed into it."""

    def __init__(self, argv: Sequence[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env)
        self._out = bytearray()
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := os.read(self.proc.stdout.fileno(), 4096):
            with self._changed:
                self._out += chunk
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def text(self) -> str:
        with self._changed:
            return self._out.decode(errors="replace")

    def wait_for(self, text: str, *, count: int = 1, timeout: float = 30) -> str:
        """Until `text` was printed `count` times; ClusterError with everything printed at the deadline."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._out.decode(errors="replace").count(text) < count:
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise ClusterError(f"virtctl console did not print {text!r} x{count}:\n{self.text}")
                self._changed.wait(min(left, 0.5))
            return self._out.decode(errors="replace")

    def type(self, keys: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(keys)
        self.proc.stdin.flush()

    def close(self) -> None:
        """Ctrl+] (virtctl's escape), then wait for it to exit (killed after 10 s)."""
        with contextlib.suppress(OSError, ValueError):
            self.type(b"\x1d")
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


class NodeCluster(Cluster):
    """The control plane, one real node and the add-on installed on it (module docstring)."""

    def __init__(self, workdir: Path) -> None:
        super().__init__(workdir)
        self.run_dir = workdir / self.netns  # node-up.sh's cgroup root is named after it
        self.node_up = False
        self.images: Images | None = None
        self.install_runs: list[Run] = []
        self.imported: dict[str, str] = {}  # image name -> the `name@digest` reference a pull leaves
        self._virtctl = ""

    # --- processes ------------------------------------------------------------------------

    def _on_node_side(self, args: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", f"--net=/run/netns/{self.netns}", *args], text=True, cwd=self.workdir,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self._env(), timeout=timeout,
                              check=False)

    def node_script(self, name: str, *args: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
        """`../shared/k8s/NAME ARGS` with `env` added, on the node's side of the network (node-up.sh,
        node-import.sh, node-kill.sh, node-down.sh of either node); ClusterError with its output if it fails."""
        argv = ["env", *(f"{k}={v}" for k, v in (env or {}).items()), "bash", str(SHARED_K8S / name), *args]
        proc = self._on_node_side(argv, timeout=timeout)
        if proc.returncode != 0:
            raise ClusterError(f"../shared/k8s/{name} failed ({proc.returncode}):\n{proc.stdout}")
        return proc.stdout

    # --- set-up ---------------------------------------------------------------------------

    def start_node(self) -> None:
        """Steps 1 and 2 of the module docstring."""
        self.start_control_plane(kubevirt_spec=KUBEVIRT_SPEC)  # sweeps stale namespaces (and their nodes) first
        sweep_stale_cgroups()
        self.node_up = True  # from here on, close() runs node-down.sh
        self.node_script("node-up.sh", env={"LAUNCHER_IMAGE": self.launcher_image()})

    def load_images(self, images: Images) -> None:
        """Step 3: `node-import.sh` of every archive; `imported` maps each name to its digest reference."""
        out = self.node_script("node-import.sh", *(str(a.path) for a in images.all()))
        for line in out.splitlines():
            name, _, reference = line.partition(" ")
            if reference:
                self.imported[name] = reference
        for archive in images.all():
            if self.imported.get(archive.name) != archive_reference(archive):
                raise ClusterError(f"node-import.sh did not load {archive.name} ({archive.digest}):\n{out}")
        self.images = images

    def install(self) -> list[Run]:
        """Step 4: the README's Install block, run as it stands; the runs are kept in `install_runs`."""
        for args in readme_install():
            run = self.kubectl(*args, timeout=600)
            self.install_runs.append(run)
            if run.rc != 0:
                raise ClusterError(f"kubectl {' '.join(args)} failed:\n{run.out}")
        self.install_output = self.install_runs[0]
        return self.install_runs

    def close(self) -> None:
        if self.node_up:
            self.node_up = False
            with contextlib.suppress(Exception):
                self._on_node_side(["bash", str(SHARED_K8S / "node-down.sh")], timeout=120)
        super().close()

    # --- what a user runs -----------------------------------------------------------------

    def virtctl_binary(self) -> str:
        if not self._virtctl:
            self._virtctl = subprocess.run(["bash", str(UNPACK), "kubevirt/virtctl"], capture_output=True, text=True,
                                           check=True, timeout=300).stdout.strip()
        return self._virtctl

    def virtctl(self, *args: str, timeout: float = 120) -> Run:
        """`virtctl ARGS` as the admin, without the notice every call prints (VIRTCTL_NOTICE)."""
        proc = self._in_netns([self.virtctl_binary(), *args], timeout=timeout)
        lines = [line for line in proc.stdout.splitlines(keepends=True) if line.rstrip("\n") != VIRTCTL_NOTICE]
        return Run(tuple(args), proc.returncode, "".join(lines))

    def follow_logs(self, pod: str, container: str) -> subprocess.Popen[str]:
        """`kubectl logs -f POD -c CONTAINER`, running (its stdout a pipe, stderr with it): what a
        user watching a pod sees until the pod ends."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns, self.kubectl_path, "logs", "-f", pod,
                                 "-c", container], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=self._env())

    @contextlib.contextmanager
    def console(self, vmi: str) -> Iterator[Console]:
        """`virtctl console VMI`, connected (its greeting printed), closed afterwards."""
        console = Console(["ip", "netns", "exec", self.netns, self.virtctl_binary(), "console", vmi], self._env())
        try:
            console.wait_for(f"Successfully connected to {vmi} console")
            yield console
        finally:
            console.close()

    def wait_for_vmi(self, name: str, phase: str = "Running", *, ready: bool | None = None,
                     timeout: float = 90) -> dict[str, Any]:
        """The VMI once it is in `phase` (it may not exist yet), and with `ready`, once its Ready
        condition says so (virt-handler sets it just after the phase)."""
        def reached() -> dict[str, Any] | None:
            r = self.kubectl("get", "vmi", name, "-o", "json")
            if r.rc != 0:
                return None
            vmi: dict[str, Any] = json.loads(r.out)
            status = vmi.get("status", {})
            is_ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions", []))
            return vmi if status.get("phase") == phase and ready in (None, is_ready) else None
        what = f"VMI {name} to be {phase}" + (f", Ready {ready}" if ready is not None else "")
        try:
            found: dict[str, Any] = self.wait_for(reached, what, timeout=timeout)
        except ClusterError as exc:
            raise ClusterError(f"{exc}\n{self.vmi_report(name)}") from None
        return found

    def vmi_report(self, name: str) -> str:
        """What a user looks at when VMI `name` does not get where it should: its phase and
        conditions, its events and its pods' (the reason virt-handler or kubelet gave), and the
        launcher's log lines above info level. Never raises: what cannot be read is said so."""
        parts: list[str] = []
        try:
            self._report_vmi(name, parts)
        except (ClusterError, subprocess.SubprocessError, ValueError, KeyError) as exc:
            parts.append(f"  (the rest could not be read: {exc!r})")
        return "\n".join(parts)

    def _report_vmi(self, name: str, parts: list[str]) -> None:
        found = self.kubectl("get", "vmi", name, "-o", "json")
        if found.rc != 0:
            parts.append(f"VMI {name}: {found.out.strip()}")
            return
        vmi = json.loads(found.out)
        status = vmi.get("status", {})
        parts.append(f"VMI {name}: phase {status.get('phase')}")
        parts += [f"  condition {c['type']}={c['status']} {c.get('reason', '')}: {c.get('message', '')}"
                  for c in status.get("conditions", [])]
        pods = self.json("get", "pods", "-l", f"kubevirt.io/created-by={vmi['metadata']['uid']}")["items"]
        for uid in [vmi["metadata"]["uid"], *(p["metadata"]["uid"] for p in pods)]:
            events = self.json("get", "events", "--field-selector", f"involvedObject.uid={uid}")["items"]
            parts += [f"  event {e['involvedObject']['kind']} {e['type']} {e['reason']}: {e['message']}"
                      for e in events if e["type"] != "Normal"]
        for pod in pods:
            log = self.kubectl("logs", pod["metadata"]["name"], "-c", "compute")
            lines = [line for line in log.out.splitlines() if '"level":"info"' not in line]
            parts.append(f"  {pod['metadata']['name']} ({pod['status'].get('phase')}), compute's log above info:")
            parts += [f"    {line}" for line in lines[-20:]]

    def launcher_pod(self, vmi: dict[str, Any]) -> dict[str, Any]:
        """The launcher pod of `vmi` (by the label virt-controller gives it)."""
        uid = vmi["metadata"]["uid"]
        pods = self.json("get", "pods", "-n", vmi["metadata"].get("namespace", "default"),
                         "-l", f"kubevirt.io/created-by={uid}")["items"]
        if len(pods) != 1:
            raise ClusterError(f"VMI {vmi['metadata']['name']} has {len(pods)} launcher pods")
        pod: dict[str, Any] = pods[0]
        return pod

    def virt_handler_metrics(self) -> str:
        """virt-handler's /metrics, scraped as Prometheus scrapes it: HTTPS on the node's address,
        its certificate the node's own (not checked here), on the port of its `--port` flag, which
        node-up.sh leaves at KubeVirt's default (VIRT_HANDLER_PORT; virt-operator's DaemonSet
        passes 8443)."""
        proc = self._on_node_side(["curl", "-sSk", "--max-time", "30", f"https://{EPIP}:{VIRT_HANDLER_PORT}/metrics"],
                                  timeout=60)
        if proc.returncode != 0:
            raise ClusterError(f"scraping virt-handler's /metrics failed: {proc.stdout}")
        return proc.stdout

    # --- the node's side ------------------------------------------------------------------

    @property
    def node_dir(self) -> Path:
        return self.run_dir / "node"

    def node_log(self, component: str) -> str:
        return (self.node_dir / "logs" / f"{component}.log").read_text(errors="replace")

    def ctr(self, *args: str) -> str:
        """`ctr -n k8s.io ARGS` against the node's containerd."""
        return subprocess.run(["ctr", "--address", str(self.node_dir / "containerd" / "containerd.sock"),
                               "-n", "k8s.io", *args], capture_output=True, text=True, check=True, timeout=60).stdout

    def containers_of(self, pod_name: str) -> list[str]:
        """The node's containerd containers (sandbox included) of the pod named `pod_name`."""
        return self.ctr("containers", "list", "-q", f'labels."io.kubernetes.pod.name"=={pod_name}').split()

    def running_tasks(self) -> set[str]:
        return {line.split()[0] for line in self.ctr("tasks", "list").splitlines()[1:]
                if line.split() and line.split()[-1] == "RUNNING"}

    @staticmethod
    def ip_in(pid: str | int, *args: str) -> str:
        """`ip ARGS` in the network namespace of process `pid` (a pod's, seen from the node)."""
        return subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", *args], capture_output=True, text=True,
                              check=True, timeout=30).stdout

    @contextlib.contextmanager
    def guest_port(self, pod_pid: str | int, bridge: str, mac: str) -> Iterator[str]:
        """A stand-in for the guest's NIC on the pod's in-pod bridge (the tiny guest runs no DHCP
        client): a veth enslaved to `bridge` in the network namespace of `pod_pid`, its peer `eth0`
        with the guest's `mac` in a namespace of its own, whose name is yielded (for
        `ip netns exec`). Both go afterwards."""
        n = next(_guest_serial)
        netns, port = f"kvch-gst-{os.getpid()}-{n}", f"kvchg{n}"
        sweep_stale_namespaces(_STALE_GUEST)
        subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True, timeout=20)
        try:
            self.ip_in(pod_pid, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", netns)
            try:
                self.ip_in(pod_pid, "link", "set", port, "master", bridge, "up")
                for args in (("link", "set", "lo", "up"), ("link", "set", "eth0", "address", mac, "up")):
                    subprocess.run(["ip", "-n", netns, *args], check=True, capture_output=True, timeout=20)
                yield netns
            finally:
                with contextlib.suppress(subprocess.CalledProcessError):
                    self.ip_in(pod_pid, "link", "del", port)
        finally:
            subprocess.run(["ip", "netns", "delete", netns], capture_output=True, timeout=20, check=False)

    def memory_cgroup(self, pod: dict[str, Any], container: str) -> Path:
        """The memory cgroup (v1) kubelet made for `container` of `pod` under the node's cgroup root."""
        status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == container)
        container_id = status["containerID"].split("://", 1)[1]
        root = Path("/sys/fs/cgroup/memory") / (self.node_dir / "cgroup-root").read_text().strip()
        found = list(root.glob(f"kubepods*/**/pod{pod['metadata']['uid']}/{container_id}"))
        if len(found) != 1:
            raise ClusterError(f"no single memory cgroup for {container} of {pod['metadata']['name']}: {found}")
        return found[0]

    # --- faults, load and more nodes (tests/cluster/test_faults.py, test_load.py, test_two_nodes.py) --

    def dir_of(self, node: str) -> Path:
        """node-up.sh's files of `node`: `RUN/node` for the first node, `RUN/node-NAME` for the others."""
        return self.node_dir if node == "node01" else self.run_dir / f"node-{node}"

    def kill(self, component: str, signal: str = "KILL", node: str = "node01") -> str:
        """`node-kill.sh COMPONENT SIGNAL` on `node`: killed inside the node, returns once its keeper
        has started it again (node-kill.sh's line). ClusterError if it does not come back."""
        env = {} if node == "node01" else {"NODE_NAME": node}
        return self.node_script("node-kill.sh", component, signal, env=env, timeout=60).strip()

    def processes(self, pod: dict[str, Any], container: str = "compute") -> dict[str, list[int]]:
        """The processes of `container` of `pod` (host PIDs, from its memory cgroup), by their
        comm (`ch-launcher`, `cloud-hyperviso`: the kernel keeps 15 characters)."""
        found: dict[str, list[int]] = {}
        for pid in self.memory_cgroup(pod, container).joinpath("cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                found.setdefault(Path(f"/proc/{pid}/comm").read_text().strip(), []).append(int(pid))
        return found

    def ch_launcher(self, pod: dict[str, Any]) -> int:
        """The host PID of the ch-launcher of `pod`: of the compute container's two `ch-launcher`
        processes, the child of the other (its monitor, the container's first process)."""
        ours = self.processes(pod)["ch-launcher"]
        (launcher,) = [pid for pid in ours if parent_pid(pid) in ours]
        return launcher

    def serial_log(self, pod: dict[str, Any]) -> str:
        """What the pod's `guest-console-log` container (KubeVirt's virt-tail) printed: the guest's serial log."""
        return self.ok("logs", pod["metadata"]["name"], "-c", "guest-console-log")

    def boots(self, pod: dict[str, Any], marker: str = "KCH-GUEST-READY") -> int:
        """How many times the guest of `pod` booted (the tiny guest prints `marker` at every boot),
        from its serial log once that shows a first boot: virt-tail prints a line some time after
        the guest wrote it, and right after a restart kubelet answers 404 for a pod it has not
        synced yet. ClusterError when no boot shows within 30 s."""
        name = pod["metadata"]["name"]

        def booted() -> int:
            r = self.kubectl("logs", name, "-c", "guest-console-log")
            return r.out.count(marker) if r.rc == 0 else 0
        found: int = self.wait_for(booted, f"a boot in {name}'s serial log", timeout=30, every=1)
        return found

    def watch(self, kind: str, *names: str, columns: str = "NAME:.metadata.name,PHASE:.status.phase") -> Watch:
        """`kubectl get KIND NAMES --watch` with `columns`, running until `Watch.close()`."""
        return Watch(["ip", "netns", "exec", self.netns, self.kubectl_path, "get", kind, *names, "--watch",
                      "--no-headers", "-o", f"custom-columns={columns}"], self._env())

    @staticmethod
    def path_in(pid: str | int, path: str) -> Path:
        """`path` as process `pid` sees it, from the host: under `/proc/PID/root`, its symlinks
        resolved against that root (the kernel resolves an absolute link met under that directory
        against the caller's root: the image's `/var/run -> /run` would lead to the host's /run)."""
        root = Path(f"/proc/{pid}/root")
        parts, resolved = [p for p in path.split("/") if p], Path("/")
        for _ in range(40):  # as the kernel's limit on nested links
            if not parts:
                return root / resolved.relative_to("/")
            part = parts.pop(0)
            candidate = resolved / part if part != ".." else resolved.parent
            on_host = root / candidate.relative_to("/")
            if on_host.is_symlink():
                target = os.readlink(on_host)
                parts = [p for p in target.split("/") if p] + parts
                resolved = Path("/") if target.startswith("/") else resolved
            else:
                resolved = candidate
        raise ClusterError(f"too many symbolic links in {path} of process {pid}")

    def process_in(self, pod: dict[str, Any], container: str, comm: str) -> str:
        """The one process of `container` of `pod` whose command name (`/proc/PID/comm`, 15
        characters at most) is `comm`, by its PID as the host sees it."""
        procs = self.memory_cgroup(pod, container).joinpath("cgroup.procs").read_text().split()
        found = [pid for pid in procs if Path(f"/proc/{pid}/comm").read_text().strip() == comm]
        if len(found) != 1:
            raise ClusterError(f"{len(found)} processes named {comm} in {container} of {pod['metadata']['name']}")
        return found[0]


def parent_pid(pid: int) -> int:
    """The parent of host process `pid` (/proc/PID/stat)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def archive_reference(archive: Archive) -> str:
    """The `name@digest` a pull of `archive` leaves (what kubelet reports as a container's imageID)."""
    return f"{archive.name.rsplit(':', 1)[0]}@{archive.digest}"

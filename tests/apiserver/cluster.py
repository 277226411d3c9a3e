"""A real Kubernetes control plane with KubeVirt's virt-api and kubevirt-ch installed, for tests.

How to use it (tests under `tests/apiserver/` get the fixtures from its conftest.py, which also
marks them `apiserver` and gives them a 600 s timeout):

    def test_something(cluster):                          # session-scoped: one control plane per run
        r = cluster.kubectl("create", "-f", "-", input=cluster.yaml(vmi))
        assert r.out == "virtualmachineinstance.kubevirt.io/x created\\n" and r.rc == 0
        cluster.json("get", "vmi", "x")                   # a decoded `kubectl ... -o json`
        cluster.admission.log                             # the admission server's stderr lines
        with cluster.admission_stopped(): ...             # the server down (connection refused)

    def test_something_destructive(make_cluster):         # a control plane of your own (about 15 s)
        c = make_cluster(workload_update_methods=[])      # what start_all() takes
        c.kubectl("delete", "-k", "addon_manifests/")

What `start_all()` sets up, in order, the way a cluster operator would have it:

1. `../shared/k8s/up.sh` (etcd, kube-apiserver v1.36.2, kube-controller-manager) inside a network
   namespace of its own (`ip netns add kvch-api-<pid>-<n>`; every process and every `kubectl`
   runs in it through `ip netns exec`), so several runs and several developers never share a
   port, and nothing touches the host's network. `down.sh` and `ip netns delete` undo it.
2. KubeVirt's CRDs (`../shared/k8s/kubevirt-crds.yaml`, server-side apply: they are too big for
   the last-applied annotation), the namespace `kubevirt` and a KubeVirt CR `kubevirt/kubevirt`
   whose status says what virt-operator would (`observedKubeVirtVersion`, `defaultArchitecture`,
   the deployment config virt-controller's `--launcher-image` comes from: `launcher_image()`);
   its `spec.workloadUpdateStrategy.workloadUpdateMethods` is a parameter; its configuration
   permits host devices as an operator who passes them through would (`PERMITTED_HOST_DEVICES`,
   with the `HostDevices` feature gate virt-api wants for them).
3. `../shared/k8s/virt-api.sh`: KubeVirt's own defaulting and validating webhooks, as a local
   process behind its Service.
4. `kubectl apply -k addon_manifests/`, exactly as the README says (its output is kept in
   `install_output`).
5. The add-on's Deployment cannot run (the control plane has no nodes: its pods stay Pending),
   so its one container runs as a local process (`tests/manifests/pod.py`: the rendered command,
   args, env and volumes) with the ServiceAccount's own token (real RBAC) and
   `--kubeconfig` as the only added flag, listening on port 8443 as in the pod. What a running
   pod would give the Service, an EndpointSlice to `10.250.0.1:8443` (the address up.sh puts on
   the namespace's loopback), is added beside the Service. Nothing of addon_manifests is changed.
   The server then does what it does in a cluster: creates its Secret, injects its CA into both
   webhook configurations, and is called by the API server through the Service.

`kubectl()` returns what kubectl prints, stdout and stderr interleaved as on a terminal, and
its exit status. Everything is stopped and removed by `close()`, also after a failure; a start
that fails raises `ClusterError` with the logs of the component that failed. What a killed test
process left (its namespace and the processes in it) is swept by the next run's first cluster.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import json
import os
import pathlib
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tests.builders import new_vmi, with_hypervisor, with_memory
from tests.manifests.pod import Container
from tests.manifests.render import MANIFESTS, REPO, one, render
from tests.manifests.render import kubectl as kubectl_binary
from tests.netns import kill_processes_in, sweep_stale_namespaces

SHARED_K8S = REPO.parent / "shared" / "k8s"
EPIP = "10.250.0.1"  # up.sh's address on the namespace's lo (EndpointSlices refuse 127/8)
ADMISSION_PORT = 8443  # the Deployment's --port
KUBEVIRT_VERSION = "v1.9.0-beta.0-1264-gd923fdb815cd"  # virt-api's build (../shared/k8s/README.md)
KUBEVIRT_REGISTRY = "quay.io/kubevirt"
# kubectl >= 1.34 logs this for every kustomization with sortOptions (its default --reorder is
# set too); it is kubectl's, harmless, and printed on every `kubectl apply|delete -k`.
SORT_NOTICE = re.compile(r"^I\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ log\.go:\d+\] Warning: Sorting order is set both in "
                         r"'kustomization\.yaml' \('sortOptions'\) and in a CLI flag \('--reorder'\)\. Using the "
                         r"kustomization file over the CLI flag\.$")
# The KubeVirt CR's spec.configuration.permittedHostDevices: KubeVirt's example USB device (its
# vmi-usb example's kubevirt.io/storage: QEMU's usb-storage, 46f4:0001) and a PCI GPU.
USB_RESOURCE = "kubevirt.io/storage"
PCI_RESOURCE = "nvidia.com/TU104GL_Tesla_T4"
PERMITTED_HOST_DEVICES = {
    "pciHostDevices": [{"pciVendorSelector": "10DE:1EB8", "resourceName": PCI_RESOURCE}],
    "usb": [{"resourceName": USB_RESOURCE, "selectors": [{"vendor": "46f4", "product": "0001"}]}],
}
_serial = itertools.count(1)
_NETNS = re.compile(r"^kvch-api-(\d+)-\d+$")  # the creating pid is in the name


def sweep_stale_clusters() -> None:
    """Remove what control planes of test processes that died without `close()` (SIGKILL, a
    killed pytest) left: their namespaces and the processes in them (etcd, kube-apiserver,
    kube-controller-manager, virt-api, ch-admission). Only names of this module's scheme whose
    creating pid is gone are touched."""
    sweep_stale_namespaces(_NETNS)


@functools.cache
def _sweep_once() -> None:
    """`sweep_stale_clusters()` the first time a test process starts a control plane."""
    sweep_stale_clusters()


def _merged(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `more` merged in: mappings key by key, lists concatenated, anything else replaced."""
    out = dict(base)
    for key, value in more.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = [*out[key], *value]
        else:
            out[key] = value
    return out


class ClusterError(RuntimeError):
    """A component did not start; the message carries its output."""


def unavailable() -> str | None:
    """Why the control plane cannot run here, or None. Tests skip with this reason."""
    if not (SHARED_K8S / "up.sh").exists():
        return f"{SHARED_K8S} is absent: ../shared is not beside this checkout"
    if os.geteuid() != 0:
        return "needs root for a network namespace of its own (CI runs as root)"
    if shutil.which("ip") is None:
        return "ip (iproute2) is not installed (`make test` installs it as root)"
    return None


@dataclass(frozen=True)
class Run:
    """One kubectl invocation: its arguments, exit status and output (stdout and stderr
    interleaved, as on a terminal)."""

    args: tuple[str, ...]
    rc: int
    out: str

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()

    def without_sort_notice(self) -> list[str]:
        """`lines` without kubectl's own sortOptions notice (see SORT_NOTICE), which must be there
        exactly once for `-k` commands."""
        notices = [line for line in self.lines if SORT_NOTICE.match(line)]
        assert len(notices) == 1, f"expected kubectl's sortOptions notice once:\n{self.out}"
        return [line for line in self.lines if not SORT_NOTICE.match(line)]


class Cluster:
    """One control plane in its own network namespace. See the module docstring."""

    def __init__(self, workdir: pathlib.Path):
        self.workdir = workdir
        self.netns = f"kvch-api-{os.getpid()}-{next(_serial)}"
        self.run_dir = workdir / "run"  # up.sh's RUN
        self.kubectl_path = kubectl_binary()
        self.admission: Container | None = None
        self.install_output: Run | None = None
        self._netns_created = False
        self._up = False
        self._token_file = workdir / "ch-admission.kubeconfig"

    # --- processes in the namespace -------------------------------------------------------

    def _env(self) -> dict[str, str]:
        venv_bin = str(pathlib.Path(self.kubectl_path).parent)
        return {**os.environ, "PATH": f"{venv_bin}:{os.environ.get('PATH', '')}", "RUN": str(self.run_dir),
                "KUBECONFIG": str(self.run_dir / "kubeconfig"), "KUBECACHEDIR": str(self.workdir / "kube-cache"),
                "KUBECTL": self.kubectl_path, "EPIP": EPIP}

    def _in_netns(self, args: Sequence[str],
                  input: str | None = None,  # noqa: A002 - subprocess.run's name, as the callers pass it
                  timeout: float = 120,
                  stderr: int | None = subprocess.STDOUT, cwd: pathlib.Path = REPO) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.netns, *args], input=input, text=True, cwd=cwd,
                              stdout=subprocess.PIPE, stderr=stderr, env=self._env(), timeout=timeout, check=False)

    def _script(self, name: str, timeout: float = 300) -> str:
        proc = self._in_netns(["bash", str(SHARED_K8S / name)], timeout=timeout)
        if proc.returncode != 0:
            raise ClusterError(f"../shared/k8s/{name} failed ({proc.returncode}):\n{proc.stdout}{self._logs()}")
        return proc.stdout

    def _logs(self) -> str:
        parts = []
        for log in ("apiserver.log", "etcd.log", "kcm.log", "virtapi.log"):
            path = self.run_dir / log
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-30:]
                parts.append(f"\n--- {log} (last lines)\n" + "\n".join(tail))
        return "".join(parts)

    # --- kubectl --------------------------------------------------------------------------

    def kubectl(self, *args: str,
                input: str | None = None,  # noqa: A002 - subprocess.run's name, as the callers pass it
                timeout: float = 120) -> Run:
        """`kubectl ARGS` as the cluster's admin (system:masters), from the checkout's root (so
        `-k addon_manifests/` reads as in the README)."""
        proc = self._in_netns([self.kubectl_path, *args], input=input, timeout=timeout)
        return Run(tuple(args), proc.returncode, proc.stdout)

    def json(self, *args: str) -> Any:
        """`kubectl ARGS -o json`, decoded; ClusterError with kubectl's message if it fails."""
        proc = self._in_netns([self.kubectl_path, *args, "-o", "json"], stderr=subprocess.PIPE)
        if proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} -o json: {proc.stderr}")
        return json.loads(proc.stdout)

    def ok(self, *args: str, input: str | None = None) -> str:  # noqa: A002 - subprocess.run's name
        """`kubectl ARGS` that must succeed; its output."""
        r = self.kubectl(*args, input=input)
        if r.rc != 0:
            raise ClusterError(f"kubectl {' '.join(args)} exited {r.rc}:\n{r.out}")
        return r.out

    @staticmethod
    def yaml(*objects: dict[str, Any] | Iterable[dict[str, Any]]) -> str:
        """Objects (or lists of them) as one multi-document YAML text for `-f -`."""
        flat: list[dict[str, Any]] = []
        for o in objects:
            flat.extend([o] if isinstance(o, dict) else list(o))
        return yaml.safe_dump_all(flat, sort_keys=False)

    def wait_for(self, condition: Callable[[], Any], what: str, timeout: float = 60, every: float = 0.2) -> Any:
        """Poll until `condition()` is truthy (returns it); ClusterError naming `what` at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(every)

    @staticmethod
    def launcher_image(kubevirt_version: str = KUBEVIRT_VERSION) -> str:
        """virt-controller's `--launcher-image` for the KubeVirt CR's deployment config
        (kubevirt pkg/virt-operator/resource/generate/components/deployments.go@d923fdb815cd)."""
        return f"{KUBEVIRT_REGISTRY}/virt-launcher:{kubevirt_version}"

    # --- set-up ---------------------------------------------------------------------------

    def start_control_plane(self, workload_update_methods: Sequence[str] = ("LiveMigrate",),
                            kubevirt_version: str = KUBEVIRT_VERSION,
                            kubevirt_spec: Mapping[str, Any] | None = None) -> Cluster:
        """Steps 1-3 of the module docstring. `kubevirt_spec`: more of the KubeVirt CR's spec."""
        _sweep_once()
        self.workdir.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["ip", "netns", "add", self.netns], capture_output=True, text=True, timeout=20,
                              check=False)
        if proc.returncode != 0:
            raise ClusterError(f"ip netns add {self.netns}: {proc.stderr.strip()}")
        self._netns_created = True
        self._up = True  # from here on, close() runs down.sh
        self._script("up.sh")
        self.ok("apply", "--server-side", "-f", str(SHARED_K8S / "kubevirt-crds.yaml"))
        self.wait_for(self._crds_established, "KubeVirt's CRDs to be Established", timeout=120, every=0.5)
        # virt-api refuses spec.domain.devices.hostDevices unless the HostDevices gate is on
        # (validateHostDevicesWithPassthroughEnabled, vmi-create-admitter.go@d923fdb815cd)
        configuration = {"developerConfiguration": {"featureGates": ["HostDevices"]},
                         "permittedHostDevices": PERMITTED_HOST_DEVICES}
        kubevirt: dict[str, Any] = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                                    "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                                    "spec": _merged({"configuration": configuration}, kubevirt_spec or {})}
        if workload_update_methods:
            kubevirt["spec"]["workloadUpdateStrategy"] = {"workloadUpdateMethods": list(workload_update_methods)}
        self.ok("create", "namespace", "kubevirt")
        self.ok("create", "-f", "-", input=self.yaml(kubevirt))
        # virt-operator's KubeVirtDeploymentConfig (kubevirt pkg/virt-operator/util/config.go@d923fdb815cd),
        # kept as JSON in both fields once a deployment is complete: virt-controller's launcher
        # image is rendered from it (LAUNCHER_IMAGE)
        deployment = json.dumps({"id": "tests", "namespace": "kubevirt", "registry": KUBEVIRT_REGISTRY,
                                 "kubeVirtVersion": kubevirt_version})
        status = {"status": {"observedKubeVirtVersion": kubevirt_version, "defaultArchitecture": "amd64",
                             "phase": "Deployed", "targetDeploymentConfig": deployment,
                             "observedDeploymentConfig": deployment,
                             "targetDeploymentID": "tests", "observedDeploymentID": "tests"}}
        self.ok("patch", "kubevirt", "kubevirt", "-n", "kubevirt", "--subresource=status", "--type=merge",
                "-p", json.dumps(status))
        self._script("virt-api.sh")
        return self

    def _crds_established(self) -> bool:
        """Every CRD has Established=True. Polled rather than `kubectl wait --all`, which fails
        outright when its watch drops under load and the relist shows a CRD without conditions
        yet (`.status.conditions accessor error: <nil>`, seen in make test at a load of 14)."""
        try:
            crds = self.json("get", "crd")["items"]
        except ClusterError:
            return False
        return bool(crds) and all(any(c.get("type") == "Established" and c.get("status") == "True"
                                      for c in crd.get("status", {}).get("conditions") or [])
                                  for crd in crds)

    def install_addon(self) -> Run:
        """Step 4: `kubectl apply -k addon_manifests/`, kept in `install_output`."""
        self.install_output = self.kubectl("apply", "-k", "addon_manifests/")
        if self.install_output.rc != 0:
            raise ClusterError(f"kubectl apply -k addon_manifests/ failed:\n{self.install_output.out}")
        return self.install_output

    def start_admission(self, timeout: float = 180, config: str | None = None) -> Container:
        """Step 5: the Deployment's container as a local process behind the Service. Returns once
        the API server reaches it (a server-side dry run of an annotated VMI gets its answer).
        `config`: another config.yaml than the ConfigMap's (as after an edit and a restart)."""
        objects = render(MANIFESTS)
        deployment = one(objects, "Deployment", "ch-admission")
        namespace = deployment["metadata"]["namespace"]
        service = one(objects, "Service", "ch-admission")
        port = service["spec"]["ports"][0]
        assert port["targetPort"] == ADMISSION_PORT
        slice_ = {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                  "metadata": {"name": "ch-admission-local", "namespace": namespace,
                               "labels": {"kubernetes.io/service-name": service["metadata"]["name"],
                                          "endpointslice.kubernetes.io/managed-by": "kubevirt-ch-tests"}},
                  "addressType": "IPv4", "ports": [{"name": port["name"], "port": ADMISSION_PORT, "protocol": "TCP"}],
                  "endpoints": [{"addresses": [EPIP], "conditions": {"ready": True}}]}
        self.ok("apply", "-f", "-", input=self.yaml(slice_))
        self._write_service_account_kubeconfig(namespace, deployment["spec"]["template"]["spec"]["serviceAccountName"])
        root = self.workdir / f"admission-{next(_serial)}"
        container = Container(deployment, objects, root, [f"--kubeconfig={self._token_file}"])
        if config is not None:
            (container.mounts["/etc/kubevirt-ch"] / "config.yaml").write_text(config)
        container.cmd = ["ip", "netns", "exec", self.netns, *container.cmd]
        container.start(timeout=timeout)
        self.admission = container
        (self.run_dir / "admission.pid").write_text(f"{container.proc.pid}\n")  # down.sh stops it too
        text = self.yaml(new_vmi("harness-probe", with_hypervisor(), with_memory("128Mi")))
        self.wait_for(lambda: "failed calling webhook" not in self.kubectl("create", "--dry-run=server", "-f", "-",
                                                                           input=text).out,
                      "the API server to reach ch-admission", timeout=timeout)
        return container

    def _write_service_account_kubeconfig(self, namespace: str, account: str) -> None:
        token = self.ok("create", "token", account, "-n", namespace, "--duration=12h").strip()
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
                  "clusters": [{"name": "local", "cluster": {
                      "server": "https://127.0.0.1:16443",
                      "certificate-authority": str(self.run_dir / "pki" / "ca.crt")}}],
                  "users": [{"name": account, "user": {"token": token}}],
                  "contexts": [{"name": "sa", "context": {"cluster": "local", "user": account}}]}
        self._token_file.write_text(yaml.safe_dump(config))

    def stop_admission(self) -> int | None:
        if self.admission is None:
            return None
        rc = self.admission.stop()
        self.admission = None
        (self.run_dir / "admission.pid").unlink(missing_ok=True)
        return rc

    @contextlib.contextmanager
    def admission_stopped(self) -> Iterator[None]:
        """The admission server stopped (its Service's endpoint refuses connections, as when its
        pods are gone), and started again afterwards."""
        self.stop_admission()
        try:
            yield
        finally:
            self.start_admission()

    def start_all(self, workload_update_methods: Sequence[str] = ("LiveMigrate",),
                  kubevirt_version: str = KUBEVIRT_VERSION) -> Cluster:
        self.start_control_plane(workload_update_methods, kubevirt_version)
        self.install_addon()
        self.start_admission()
        return self

    # --- what operators look at -----------------------------------------------------------

    def metrics(self) -> str:
        """The admission server's /metrics, scraped as Prometheus would scrape a pod: over HTTPS
        at its address, verified with the CA in the server's own Secret."""
        secret = self.json("get", "secret", "ch-admission-tls", "-n", "kubevirt-ch")
        ca = self.workdir / "scrape-ca.crt"
        ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
        name = "ch-admission.kubevirt-ch.svc"
        proc = self._in_netns(["curl", "-sS", "--fail", "--cacert", str(ca), "--resolve",
                               f"{name}:{ADMISSION_PORT}:{EPIP}", f"https://{name}:{ADMISSION_PORT}/metrics"],
                              stderr=subprocess.PIPE, timeout=30)
        if proc.returncode != 0:
            raise ClusterError(f"scraping /metrics failed: {proc.stderr}")
        return proc.stdout

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_admission()
        if self._up:
            self._up = False
            with contextlib.suppress(Exception):
                self._in_netns(["bash", str(SHARED_K8S / "down.sh")], timeout=60)
        if self._netns_created:
            self._netns_created = False
            kill_processes_in(self.netns, timeout=10)  # whatever down.sh had no pid file for
            subprocess.run(["ip", "netns", "delete", self.netns], capture_output=True, timeout=20, check=False)

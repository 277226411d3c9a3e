"""A second real node beside node01, for the stories that need two (tests/cluster/test_two_nodes.py).

`SecondNode(cluster).start()` runs `../shared/k8s/node-up.sh` with `NODE_NAME=node02
NODE_IP=10.250.0.2 POD_CIDR=10.244.1.0/24` on the cluster's side of the network, after node01: a
worker (containerd, kubelet, kube-proxy, virt-handler) in a network namespace of its own, joined to
the control plane's by a veth pair, as a second machine would be. Its containerd is its own, so the
cluster's images are imported into it with `node-import.sh`, as a registry pull leaves them (KubeVirt
pins a migration target's containerDisks to the source's image digest). `stop()` runs
`node-down.sh` for it; the cluster's own close() (down.sh) stops every node anyway.

Failure behaviour: a script that fails raises ClusterError with its output; `start()` stops what
it started before raising.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.apiserver.cluster import ClusterError
from tests.cluster.images import Archive, Images
from tests.cluster.node import NodeCluster, archive_reference


class SecondNode:
    """node02 of the cluster (module docstring)."""

    def __init__(self, cluster: NodeCluster, name: str = "node02", ip: str = "10.250.0.2",
                 pod_cidr: str = "10.244.1.0/24", *, kubelet_config: str = "",
                 archives: Callable[[Images], Sequence[Archive]] = Images.all) -> None:
        """`kubelet_config`: lines added to its KubeletConfiguration (node-up.sh's
        KUBELET_CONFIG_EXTRA); `archives`: which of the cluster's images it gets."""
        self.cluster = cluster
        self.name, self.ip, self.pod_cidr = name, ip, pod_cidr
        self.kubelet_config = kubelet_config
        self.archives = archives
        self.up = False

    @property
    def env(self) -> dict[str, str]:
        env = {"NODE_NAME": self.name, "NODE_IP": self.ip, "POD_CIDR": self.pod_cidr}
        return {**env, "KUBELET_CONFIG_EXTRA": self.kubelet_config} if self.kubelet_config else env

    @property
    def dir(self) -> Path:
        """node-up.sh's files of this node (`RUN/node-NAME`)."""
        return self.cluster.run_dir / f"node-{self.name}"

    def start(self) -> str:
        """node-up.sh, then the cluster's images imported; node-up.sh's output (it returns once the
        node is Ready and virt-handler marked it schedulable)."""
        images = self.cluster.images
        if images is None:
            raise ClusterError("the cluster's images are not loaded yet: nothing to import into a second node")
        self.up = True
        try:
            out = self.cluster.node_script("node-up.sh", env=self.env)
            archives = self.archives(images)
            imported = self.cluster.node_script("node-import.sh", *(str(a.path) for a in archives),
                                                env={"NODE_NAME": self.name})
            references = dict(line.split(" ", 1) for line in imported.splitlines() if " " in line)
            for archive in archives:
                if references.get(archive.name) != archive_reference(archive):
                    raise ClusterError(f"node-import.sh did not load {archive.name} on {self.name}:\n{imported}")
        except BaseException:
            self.stop()
            raise
        return out

    def pods(self) -> list[str]:
        """The pods bound to this node (namespace/name), but its virt-handler's stand-in pod."""
        items = self.cluster.json("get", "pods", "-A", "--field-selector", f"spec.nodeName={self.name}")["items"]
        return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in items
                if p["metadata"]["name"] != f"virt-handler-{self.name}"]

    def stop(self) -> None:
        """node-down.sh, then the Node object and its virt-handler pod deleted, as when a machine
        leaves a cluster: this control plane has no node lifecycle controller to taint a node that
        stopped reporting, so the scheduler would go on binding pods to it."""
        if self.up:
            self.up = False
            self.cluster.node_script("node-down.sh", env={"NODE_NAME": self.name}, timeout=120)
            self.cluster.kubectl("-n", "kubevirt", "delete", "pod", f"virt-handler-{self.name}", "--ignore-not-found",
                                 "--force", "--grace-period=0")
            r = self.cluster.kubectl("delete", "node", self.name, "--ignore-not-found")
            if r.rc != 0:
                raise ClusterError(f"kubectl delete node {self.name}: {r.out}")

    def log(self, component: str) -> str:
        return (self.dir / "logs" / f"{component}.log").read_text(errors="replace")

    def ctr(self, *args: str) -> str:
        """`ctr -n k8s.io ARGS` against this node's containerd."""
        return subprocess.run(["ctr", "--address", str(self.dir / "containerd" / "containerd.sock"), "-n", "k8s.io",
                               *args], capture_output=True, text=True, check=True, timeout=60).stdout

    def containers_of(self, pod_name: str) -> list[str]:
        """This node's containerd containers (sandbox included) of the pod named `pod_name`."""
        return self.ctr("containers", "list", "-q", f'labels."io.kubernetes.pod.name"=={pod_name}').split()

    def running_tasks(self) -> set[str]:
        return {line.split()[0] for line in self.ctr("tasks", "list").splitlines()[1:]
                if line.split() and line.split()[-1] == "RUNNING"}

"""Twenty Cloud Hypervisor VMIs created at once on the one node (bench/cluster.py measures 1, 10
and 20 against plain pods): all of them run, each pod within the memory it asked for, and
virt-handler idles while they do."""

from __future__ import annotations

from tests.cluster.load import cpu_share, create_at_once, delete_batch, host_pid, pod_memory, pods_of
from tests.cluster.node import NodeCluster

MiB = 1 << 20
COUNT = 20


def test_twenty_vmis_created_at_once_all_run_within_their_requests(node_cluster: NodeCluster):
    batch = create_at_once(node_cluster, "vmi", COUNT, "load20", timeout=420)
    try:
        assert sorted(batch.seconds) == sorted(batch.names)
        rows = node_cluster.ok("get", "vmi", "-l", "kubevirt-ch.io/load=load20").splitlines()[1:]
        assert len(rows) == COUNT and all(row.split()[2] == "Running" for row in rows), rows
        pods = pods_of(node_cluster, batch)
        assert len(pods) == COUNT
        memory = [pod_memory(node_cluster, pod) for pod in pods]
        handler = cpu_share(host_pid(node_cluster, "virt-handler"), 10)
        print(f"\n{COUNT} VMIs at once: create -> Running p50 {batch.p50:.1f} s, p99 {batch.p99:.1f} s; "
              f"pod memory peak {min(m.peak for m in memory) / MiB:.0f}-{max(m.peak for m in memory) / MiB:.0f} MiB "
              f"against a request of {memory[0].request / MiB:.0f} MiB; virt-handler idle {handler:.1%} of a CPU")
        assert all(m.peak < m.request for m in memory), memory
        assert handler < 0.5
    finally:
        delete_batch(node_cluster, batch)

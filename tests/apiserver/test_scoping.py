"""Which requests reach ch-admission, through the real API server: nothing that does not select
Cloud Hypervisor, nothing in the namespaces it skips (a policy refuses those instead), and, with
the server down, nothing that cannot change its verdict, so KubeVirt's own updates (finalizer
removal above all) never wait for it."""

from __future__ import annotations

from tests.apiserver.cluster import Run
from tests.apiserver.objects_support import CH, create, launcher_pod, pool, replicaset, reviews, vm, vmi
from tests.apiserver.readme import row_showing

DOWN = ('Error from server (InternalError): {where}Internal error occurred: failed calling webhook "{hook}": '
        'failed to call webhook: Post "https://ch-admission.kubevirt-ch.svc:443/{path}?timeout=5s": '
        'dial tcp 10.250.0.1:8443: connect: connection refused')


def test_what_does_not_select_cloud_hypervisor_never_reaches_the_server(cluster):
    before = reviews(cluster)
    assert create(cluster, vmi("plain-vmi", annotations=None)).rc == 0
    assert create(cluster, vm("plain-vm", template_annotations=None)).rc == 0
    rs = replicaset("plain-rs")
    del rs["spec"]["template"]["metadata"]["annotations"]
    assert create(cluster, rs).rc == 0
    owner = cluster.json("get", "vmi", "plain-vmi")
    assert create(cluster, launcher_pod(owner)).rc == 0
    assert cluster.kubectl("label", "vmi", "plain-vmi", "a=b").rc == 0
    other = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "not-a-launcher", "namespace": "default",
                                                             "annotations": dict(CH)},
             "spec": {"containers": [{"name": "c", "image": "example.org/app:1"}]}}
    assert create(cluster, other).rc == 0  # annotated, but no kubevirt.io=virt-launcher label
    assert reviews(cluster) == before


def test_cloud_hypervisor_objects_in_skipped_namespaces_are_refused_by_the_policy_not_the_server(cluster):
    before = reviews(cluster)
    for namespace, obj, resource in (("kube-public", vmi("in-kube-public"), "virtualmachineinstances"),
                                     ("kube-system", vm("in-kube-system"), "virtualmachines")):
        obj["metadata"]["namespace"] = namespace
        r = create(cluster, obj)
        name = obj["metadata"]["name"]
        assert (r.rc, r.lines) == (1, [
            (f'Error from server (Forbidden): error when creating "STDIN": {resource}.kubevirt.io "{name}" is '
             "forbidden: ValidatingAdmissionPolicy 'kubevirt-ch-unserved-namespaces' with binding "
             "'kubevirt-ch-unserved-namespaces' denied request: kubevirt-ch.io/hypervisor: cloud-hypervisor is not "
             f"served in namespace {namespace}: kubevirt-ch skips its own and the Kubernetes system namespaces; create "
             "Cloud Hypervisor VMs in another namespace, or remove the annotation to use QEMU")])
    row_showing(r.lines[0])  # kube-system, as in the README's row
    plain = vmi("plain-in-kube-public", annotations=None)
    plain["metadata"]["namespace"] = "kube-public"
    assert create(cluster, plain).rc == 0
    assert reviews(cluster) == before


def test_with_the_server_down_kubevirts_updates_go_through_and_only_changes_it_must_judge_fail(cluster):
    """The story of a ch-admission outage: a CH VMI with a finalizer is labelled, annotated,
    deleted and its finalizer removed; another one's status is written (as virt-handler does); its
    VM is started and stopped, a replica set and a pool are scaled, a VM is moved back to QEMU.
    What needs the server (a new CH VMI, a template change, removing a VMI's annotation, a CH
    launcher pod) fails, saying so; the rest of the cluster is not affected."""
    held = vmi("held")
    held["metadata"]["finalizers"] = ["kubevirt.io/foregroundDeleteVirtualMachine"]
    assert create(cluster, held).rc == 0
    owner = cluster.json("get", "vmi", "held")
    assert create(cluster, vm("outage-vm"), replicaset("outage-rs"), pool("outage-pool"), vmi("outage-vmi")).rc == 0

    with cluster.admission_stopped():
        ok = [
            ("label", "vmi", "held", "kubevirt.io/outdatedLauncherImage="),
            ("annotate", "vmi", "held", "kubevirt.io/latest-observed-api-version=v1"),
            ("patch", "vmi", "held", "--type=json",
             "-p", '[{"op": "add", "path": "/metadata/finalizers/-", "value": "example.org/backup"}]'),
            ("delete", "vmi", "held", "--wait=false"),
            ("patch", "vmi", "held", "--type=json", "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]'),
            ("patch", "vm", "outage-vm", "--type=merge", "-p", '{"spec": {"runStrategy": "Always"}}'),
            ("patch", "vm", "outage-vm", "--type=merge", "-p", '{"spec": {"runStrategy": "Halted"}}'),
            ("scale", "vmirs", "outage-rs", "--replicas=3"),
            # virt-handler's status writes (the VMI CRD has no status subresource: they update the VMI)
            ("patch", "vmi", "outage-vmi", "--type=merge", "-p", '{"status": {"phase": "Scheduling"}}'),
            ("patch", "vmpool", "outage-pool", "--type=merge", "-p", '{"spec": {"replicas": 2}}'),
        ]
        printed = ['virtualmachineinstance.kubevirt.io/held labeled',
                   'virtualmachineinstance.kubevirt.io/held annotated',
                   'virtualmachineinstance.kubevirt.io/held patched',
                   'virtualmachineinstance.kubevirt.io "held" deleted from default namespace',
                   'virtualmachineinstance.kubevirt.io/held patched',
                   'virtualmachine.kubevirt.io/outage-vm patched', 'virtualmachine.kubevirt.io/outage-vm patched',
                   'virtualmachineinstancereplicaset.kubevirt.io/outage-rs scaled',
                   'virtualmachineinstance.kubevirt.io/outage-vmi patched',
                   'virtualmachinepool.pool.kubevirt.io/outage-pool patched']
        for args, out in zip(ok, printed, strict=True):
            assert cluster.kubectl(*args) == Run(args, 0, out + "\n")
        assert cluster.kubectl("get", "vmi", "held").rc == 1  # gone: its finalizers are removed

        # moving a VM back to QEMU needs no server either
        back = ("patch", "vm", "outage-vm", "--type=json",
                "-p", '[{"op": "remove", "path": "/spec/template/metadata/annotations"}]')
        assert cluster.kubectl(*back) == Run(back, 0, "virtualmachine.kubevirt.io/outage-vm patched\n")

        stdin = 'error when creating "STDIN": '
        validate = DOWN.format(where=stdin, hook="virtualmachineinstances.validator.kubevirt-ch.io", path="validate")
        assert create(cluster, vmi("during-outage")) == Run(("create", "-f", "-"), 1, validate + "\n")
        template = ("patch", "vmirs", "outage-rs", "--type=merge",
                    "-p", '{"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 5}}}}')
        assert cluster.kubectl(*template) == Run(template, 1, DOWN.format(
            where="", hook="replicasets.validator.kubevirt-ch.io", path="validate") + "\n")
        backend = ("annotate", "vmi", "outage-vmi", "kubevirt-ch.io/hypervisor-")
        assert cluster.kubectl(*backend) == Run(backend, 1, DOWN.format(
            where="", hook="virtualmachineinstances.validator.kubevirt-ch.io", path="validate") + "\n")
        row_showing(DOWN.format(where="", hook="virtualmachineinstances.validator.kubevirt-ch.io", path="validate"))
        assert create(cluster, launcher_pod(owner)) == Run(("create", "-f", "-"), 1, DOWN.format(
            where=stdin, hook="launcher-pods.mutator.kubevirt-ch.io", path="mutate-pod") + "\n")
        assert create(cluster, vmi("qemu-during-outage", annotations=None)).rc == 0

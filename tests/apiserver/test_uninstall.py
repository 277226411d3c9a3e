"""The README's uninstall, to the end, on a control plane of its own: at no point can a Cloud
Hypervisor VM start on QEMU, KubeVirt can keep updating and deleting the existing objects, and
nothing of the add-on is left behind."""

from __future__ import annotations

import re

import pytest

from tests.apiserver.cluster import Run
from tests.apiserver.objects_support import create, launcher_pod, pool, replicaset, vm, vmi
from tests.apiserver.readme import row_showing

GUARD = ("ValidatingAdmissionPolicy 'kubevirt-ch-guard' with binding 'kubevirt-ch-guard' denied request: the Cloud "
         "Hypervisor backend (kubevirt-ch) is not installed in this cluster, so kubevirt-ch.io/hypervisor: "
         "cloud-hypervisor cannot be honoured; remove the annotation to run this VM on KubeVirt's default backend "
         "(QEMU), or install kubevirt-ch")
# docs/operations.md §8 step 2: what still selects Cloud Hypervisor
LISTINGS = [
    ("vmi", ("{range .items[?(@.metadata.annotations.kubevirt-ch\\.io/hypervisor==\"cloud-hypervisor\")]}"
             "{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}")),
    ("vm,vmirs", ("{range .items[?(@.spec.template.metadata.annotations.kubevirt-ch\\.io/hypervisor=="
                  "\"cloud-hypervisor\")]}{.kind}/{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}")),
    ("vmpool", ("{range .items[?(@.spec.virtualMachineTemplate.spec.template.metadata.annotations.kubevirt-ch\\.io/"
                "hypervisor==\"cloud-hypervisor\")]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}")),
]


@pytest.fixture(scope="module")
def story(make_cluster):
    c = make_cluster(workload_update_methods=[])
    assert create(c, vmi("ch-vmi"), vm("ch-vm"), replicaset("ch-rs"), pool("ch-pool")).rc == 0
    owner = c.json("get", "vmi", "ch-vmi")
    running = create(c, launcher_pod(owner))  # its launcher pod, mutated while the add-on was there
    assert running.rc == 0
    return c, owner


def cannot_start_on_qemu(c, owner) -> None:
    """What would start a Cloud Hypervisor VM is refused: a new VMI, and a new launcher pod for the
    existing one (virt-controller restarting it, or a migration target)."""
    r = create(c, vmi("new-ch-vmi"))
    assert r.rc == 1 and r.out.startswith(
        'Error from server (Forbidden): error when creating "STDIN": virtualmachineinstances.kubevirt.io '
        f'"new-ch-vmi" is forbidden: {GUARD}'), r.out
    row_showing(r.lines[0])
    r = create(c, launcher_pod(owner))
    assert r.rc == 1 and re.fullmatch(r'Error from server \(Forbidden\): error when creating "STDIN": pods '
                                      r'"virt-launcher-ch-vmi-[a-z0-9]{5}" is forbidden: ' + re.escape(GUARD) + "\n",
                                      r.out), r.out


def listed(c) -> list[str]:
    return [line for kinds, path in LISTINGS
            for line in c.ok("get", kinds, "-A", "-o", f"jsonpath={path}").splitlines()]


def test_uninstall_in_the_readmes_order_leaves_nothing_and_no_vm_on_qemu(story):
    c, owner = story
    kubevirt_before = c.json("get", "kubevirt", "kubevirt", "-n", "kubevirt")["metadata"]["resourceVersion"]

    # 1. the guard
    r = c.kubectl("apply", "-k", "addon_manifests/guard/")
    assert r == Run(r.args, 0, "validatingadmissionpolicy.admissionregistration.k8s.io/kubevirt-ch-guard created\n"
                               "validatingadmissionpolicybinding.admissionregistration.k8s.io/kubevirt-ch-guard "
                               "created\n")
    probe = c.yaml(vmi("probe-guard"))  # policies take effect within about a second
    c.wait_for(lambda: GUARD in c.kubectl("create", "--dry-run=server", "-f", "-", input=probe).out,
               "the guard to take effect")
    cannot_start_on_qemu(c, owner)

    # 2. decide about each Cloud Hypervisor VM: stop and delete the VMI (as virt-controller would,
    # finalizer included), move the VM back to QEMU, delete the replica set and the pool
    assert listed(c) == ["default/ch-vmi", "VirtualMachine/default/ch-vm",
                         "VirtualMachineInstanceReplicaSet/default/ch-rs", "default/ch-pool"]
    assert c.kubectl("label", "vmi", "ch-vmi", "kubevirt.io/outdatedLauncherImage=").rc == 0  # KubeVirt's updates
    c.ok("patch", "vmi", "ch-vmi", "--type=merge", "-p", '{"metadata": {"finalizers": ["kubevirt.io/test-hold"]}}')
    c.ok("delete", "vmi", "ch-vmi", "--wait=false")
    c.ok("patch", "vmi", "ch-vmi", "--type=json", "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
    back = ("patch", "vm", "ch-vm", "--type=json", "-p",
            '[{"op": "remove", "path": "/spec/template/metadata/annotations/kubevirt-ch.io~1hypervisor"}]')
    assert c.kubectl(*back) == Run(back, 0, "virtualmachine.kubevirt.io/ch-vm patched\n")
    again = ("patch", "vm", "ch-vm", "--type=merge", "-p",
             '{"spec": {"template": {"metadata": {"annotations": {"kubevirt-ch.io/hypervisor": "cloud-hypervisor"}}}}}')
    r = c.kubectl(*again)
    assert r.rc == 1 and f'virtualmachines.kubevirt.io "ch-vm" is forbidden: {GUARD}' in r.out  # no way back now
    c.ok("delete", "vmirs", "ch-rs")
    c.ok("delete", "vmpool", "ch-pool")

    # 3. the webhooks, then the server and everything else, in the kustomization's order
    r = c.kubectl("delete", "-k", "addon_manifests/", timeout=180)
    assert r.rc == 0
    assert r.without_sort_notice() == [
        'validatingwebhookconfiguration.admissionregistration.k8s.io "kubevirt-ch-validator" deleted',
        'mutatingwebhookconfiguration.admissionregistration.k8s.io "kubevirt-ch-launcher-mutator" deleted',
        'namespace "kubevirt-ch" deleted',
        'serviceaccount "ch-admission" deleted from kubevirt-ch namespace',
        'clusterrole.rbac.authorization.k8s.io "kubevirt-ch:ch-admission" deleted',
        'clusterrolebinding.rbac.authorization.k8s.io "kubevirt-ch:ch-admission" deleted',
        'clusterrole.rbac.authorization.k8s.io "kubevirt-ch:ch-admission-cabundle" deleted',
        'clusterrolebinding.rbac.authorization.k8s.io "kubevirt-ch:ch-admission-cabundle" deleted',
        'role.rbac.authorization.k8s.io "ch-admission-certs" deleted from kubevirt-ch namespace',
        'rolebinding.rbac.authorization.k8s.io "ch-admission-certs" deleted from kubevirt-ch namespace',
        'role.rbac.authorization.k8s.io "ch-admission-events" deleted from kubevirt-ch namespace',
        'rolebinding.rbac.authorization.k8s.io "ch-admission-events" deleted from kubevirt-ch namespace',
        'configmap "ch-admission-config" deleted from kubevirt-ch namespace',
        'priorityclass.scheduling.k8s.io "kubevirt-ch-critical" deleted',
        'deployment.apps "ch-admission" deleted from kubevirt-ch namespace',
        'service "ch-admission" deleted from kubevirt-ch namespace',
        'poddisruptionbudget.policy "ch-admission" deleted from kubevirt-ch namespace',
        'validatingadmissionpolicy.admissionregistration.k8s.io "kubevirt-ch-unserved-namespaces" deleted',
        'validatingadmissionpolicybinding.admissionregistration.k8s.io "kubevirt-ch-unserved-namespaces" deleted',
    ]
    c.stop_admission()  # its pods are gone with the Deployment
    cannot_start_on_qemu(c, owner)
    plain = create(c, vmi("qemu-vmi", annotations=None))
    assert plain.out == "virtualmachineinstance.kubevirt.io/qemu-vmi created\n"  # everything else works
    assert listed(c) == []

    # 4. the guard, once nothing selects Cloud Hypervisor
    r = c.kubectl("delete", "-k", "addon_manifests/guard/")
    assert r == Run(r.args, 0, 'validatingadmissionpolicy.admissionregistration.k8s.io "kubevirt-ch-guard" deleted\n'
                               'validatingadmissionpolicybinding.admissionregistration.k8s.io "kubevirt-ch-guard" '
                               'deleted\n')

    # nothing left: no object of any kind carries the add-on's label, none of its names remains,
    # its namespace is gone (with the Secret and Events the server made), the KubeVirt CR untouched
    kinds = c.ok("api-resources", "--verbs=list", "-o", "name").split()
    r = c.kubectl("get", ",".join(kinds), "-A", "-l", "app.kubernetes.io/part-of=kubevirt-ch")
    assert r.rc == 0 and r.lines[-1] == "No resources found"
    assert all(line.startswith("Warning: ") and "deprecated" in line for line in r.lines[:-1]), r.out
    assert c.kubectl("get", "namespace", "kubevirt-ch").out == \
        'Error from server (NotFound): namespaces "kubevirt-ch" not found\n'
    cluster_scoped = c.ok("get", "clusterrole,clusterrolebinding,priorityclass,validatingwebhookconfiguration,"
                                 "mutatingwebhookconfiguration,validatingadmissionpolicy,"
                                 "validatingadmissionpolicybinding", "-o", "name")
    assert "kubevirt-ch" not in cluster_scoped
    assert c.json("get", "kubevirt", "kubevirt", "-n", "kubevirt")["metadata"]["resourceVersion"] == kubevirt_before

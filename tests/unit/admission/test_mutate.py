"""The launcher-pod mutator as pure functions: plan, patch, idempotence, failing closed."""

from __future__ import annotations

import base64
import copy
import json

import pytest

from admission.cluster import KubeVirtStatus
from admission.config import load_config
from admission.mutate import RECORD_ANNOTATION, NeedsVMI, mutate_pod, plan
from admission.overhead import KUBEVIRT_V1_9_0, ch_overhead, kubevirt_overhead, plan_of
from admission.review import parse_review
from ch_launcher.kubevirt.quantity import MiB, quantity_bytes
from ch_launcher.kubevirt.vmi import parse_vmi
from tests.builders import with_uid
from tests.unit.admission import builders as b
from tests.unit.admission.builders import CH
from tests.unit.admission.jsonpatch import apply_patch

CONFIG = load_config()
IMAGE = CONFIG.launcher.image


def the_vmi(**kw):
    return b.vmi(with_uid("vmi-uid"), annotations=CH, **kw)


def run(pod, vmi=None, vmi_error=None, kubevirt=None):
    """Plan then mutate, as the server does; returns (response, verdict, patched pod or None)."""
    request = parse_review(b.review(pod, kind="Pod", name=""))
    first = plan(request, CONFIG)
    if isinstance(first, NeedsVMI):
        first = mutate_pod(request, CONFIG, first, vmi, vmi_error, kubevirt)
    response = first.review["response"]
    patched = None
    if "patch" in response:
        patched = apply_patch(pod, json.loads(base64.b64decode(response["patch"])))
    return response, first.verdict, patched


def compute(pod):
    return next(c for c in pod["spec"]["containers"] if c["name"] == "compute")


def ours(vmi):
    return ch_overhead(parse_vmi(vmi), plan_of(parse_vmi(vmi))).total


def test_the_compute_container_gets_ch_launcher_and_keeps_virt_launchers_flags():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    response, verdict, patched = run(pod, vmi)
    assert verdict == "mutated" and response["allowed"] is True
    c = compute(patched)
    assert c["image"] == IMAGE
    assert c["command"] == CONFIG.launcher.command + compute(pod)["command"][1:]
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert response["auditAnnotations"] == {"launcher-image": IMAGE}


def test_flags_in_args_as_kubevirt_main_renders_them_are_kept_too():
    # v1.9.0 puts virt-launcher-monitor's flags in `command`; main (kubevirt 45dd8be60d, in
    # d923fdb815cd) moves them to `args`, which the patch must leave alone.
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    c = compute(pod)
    c["command"], c["args"] = c["command"][:1], c["command"][1:]
    _, verdict, patched = run(pod, vmi)
    assert verdict == "mutated"
    assert compute(patched)["command"] == CONFIG.launcher.command
    assert compute(patched)["args"] == c["args"]
    assert run(patched, vmi)[1] == "unchanged"


def test_memory_is_resized_from_kubevirts_overhead_to_ours():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi, overhead=290 * MiB)
    _, _, patched = run(pod, vmi)
    request = quantity_bytes(compute(patched)["resources"]["requests"]["memory"])
    assert request == 128 * MiB + ours(vmi)
    assert patched["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] == str(ours(vmi))
    assert "memory" not in compute(patched)["resources"]["limits"]  # no limit rendered, none added


def test_a_memory_limit_is_resized_too():
    vmi = the_vmi()
    _, _, patched = run(b.launcher_pod(vmi, limit=True), vmi)
    assert quantity_bytes(compute(patched)["resources"]["limits"]["memory"]) == 128 * MiB + ours(vmi)


def test_with_overcommit_guest_overhead_only_the_limit_carries_the_overhead():
    vmi = the_vmi()
    vmi["spec"]["domain"]["resources"]["overcommitGuestOverhead"] = True
    pod = b.launcher_pod(vmi, limit=True)
    pod_request = compute(pod)["resources"]["requests"]["memory"]
    compute(pod)["resources"]["requests"]["memory"] = str(128 * MiB)  # KubeVirt left the overhead out
    _, _, patched = run(pod, vmi)
    assert compute(patched)["resources"]["requests"]["memory"] == str(128 * MiB)
    assert quantity_bytes(compute(patched)["resources"]["limits"]["memory"]) == 128 * MiB + ours(vmi)
    assert pod_request != str(128 * MiB)


def test_with_hugepages_the_memory_request_is_just_our_overhead():
    vmi = the_vmi()
    vmi["spec"]["domain"]["memory"] = {"hugepages": {"pageSize": "2Mi"}}
    pod = b.launcher_pod(vmi, hugepages=True)
    _, _, patched = run(pod, vmi)
    assert quantity_bytes(compute(patched)["resources"]["requests"]["memory"]) == ours(vmi)
    assert compute(patched)["resources"]["requests"]["hugepages-2Mi"] == "128Mi"


def test_without_kubevirts_annotation_its_overhead_is_estimated_erring_small():
    vmi = the_vmi()
    estimate = kubevirt_overhead(parse_vmi(vmi), constants=KUBEVIRT_V1_9_0).total
    pod = b.launcher_pod(vmi, overhead=None)
    compute(pod)["resources"]["requests"]["memory"] = str(128 * MiB + estimate)
    _, _, patched = run(pod, vmi)
    assert quantity_bytes(compute(patched)["resources"]["requests"]["memory"]) == 128 * MiB + ours(vmi)
    record = json.loads(patched["metadata"]["annotations"][RECORD_ANNOTATION])
    assert "v1.9.0" in record["memoryOverheadBytes"]["kubevirtSource"]


@pytest.mark.parametrize("garbage", ["\u00b2", "\u0661\u0662", "9" * 5000, "-5", "290Mi"])
def test_an_overhead_annotation_that_is_not_kubevirts_integer_is_estimated_instead(garbage):
    vmi = the_vmi()
    estimate = kubevirt_overhead(parse_vmi(vmi), constants=KUBEVIRT_V1_9_0).total
    pod = b.launcher_pod(vmi, overhead=None)
    pod["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] = garbage
    compute(pod)["resources"]["requests"]["memory"] = str(128 * MiB + estimate)
    _, verdict, patched = run(pod, vmi)
    assert verdict == "mutated"
    assert quantity_bytes(compute(patched)["resources"]["requests"]["memory"]) == 128 * MiB + ours(vmi)
    record = json.loads(patched["metadata"]["annotations"][RECORD_ANNOTATION])
    assert "estimated" in record["memoryOverheadBytes"]["kubevirtSource"]


def test_the_vhost_net_device_is_not_asked_for_and_an_empty_directory_stands_at_its_path():
    """virt-controller asks for `devices.kubevirt.io/vhost-net` for every virtio NIC (QEMU's vhost
    backend); a node without /dev/vhost-net offers 0 of them and the pod would stay Pending
    ("Insufficient devices.kubevirt.io/vhost-net", as on the node of tests/cluster). Cloud
    Hypervisor's virtio-net never opens it: the request and limit go, kvm and tun stay. But
    virt-handler chowns /dev/vhost-net in the compute container before the first Sync of a
    non-root VMI with a virtio NIC and fails the VMI where the path is missing, so an empty
    directory is mounted there, with no sizeLimit: kubelet's eviction manager counts the
    directory's own block (4 KiB on ext4) and evicted every launcher pod about a minute after it
    started while the limit was 1Ki ("Usage of EmptyDir volume ... exceeds the limit", found on
    the node of tests/cluster)."""
    vmi = the_vmi()
    pod = b.launcher_pod(vmi, limit=True)
    _, verdict, patched = run(pod, vmi)
    assert verdict == "mutated"
    c = compute(patched)
    for kind in ("requests", "limits"):
        assert "devices.kubevirt.io/vhost-net" not in c["resources"][kind]
        assert c["resources"][kind]["devices.kubevirt.io/kvm"] == "1"
        assert c["resources"][kind]["devices.kubevirt.io/tun"] == "1"
    assert c["volumeMounts"] == [{"name": "kubevirt-ch-vhost-net", "mountPath": "/dev/vhost-net"}]
    assert patched["spec"]["volumes"] == [{"name": "kubevirt-ch-vhost-net", "emptyDir": {}}]
    record = json.loads(patched["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record["removedResources"] == ["devices.kubevirt.io/vhost-net"]
    assert record["placeholders"] == ["/dev/vhost-net"]
    assert run(patched, vmi)[1] == "unchanged"


def test_the_placeholder_is_added_beside_the_pods_own_volumes_and_mounts():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    pod["spec"]["volumes"] = [{"name": "private", "emptyDir": {}}]
    compute(pod)["volumeMounts"] = [{"name": "private", "mountPath": "/var/run/kubevirt-private"}]
    _, _, patched = run(pod, vmi)
    assert [v["name"] for v in patched["spec"]["volumes"]] == ["private", "kubevirt-ch-vhost-net"]
    assert [m["mountPath"] for m in compute(patched)["volumeMounts"]] == ["/var/run/kubevirt-private", "/dev/vhost-net"]


@pytest.mark.parametrize("clash", ["volume", "mount"])
def test_a_pod_that_already_has_the_placeholders_name_or_path_is_refused(clash):
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    if clash == "volume":
        pod["spec"]["volumes"] = [{"name": "kubevirt-ch-vhost-net", "emptyDir": {}}]
    else:
        compute(pod)["volumeMounts"] = [{"name": "x", "mountPath": "/dev/vhost-net"}]
    response, verdict, _ = run(pod, vmi)
    assert verdict == "denied" and response["allowed"] is False
    assert "vhost-net" in response["status"]["message"]


def test_a_pod_without_a_nic_has_no_vhost_net_to_replace():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi, nic=False)
    _, _, patched = run(pod, vmi)
    assert compute(patched)["resources"]["limits"] == {"devices.kubevirt.io/kvm": "1"}
    assert "volumeMounts" not in compute(patched) and "volumes" not in patched["spec"]
    record = json.loads(patched["metadata"]["annotations"][RECORD_ANNOTATION])
    assert "removedResources" not in record and "placeholders" not in record


def test_other_containers_and_init_containers_are_untouched():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    _, _, patched = run(pod, vmi)
    assert patched["spec"]["containers"][1] == pod["spec"]["containers"][1]
    assert patched["spec"]["initContainers"] == pod["spec"]["initContainers"]


def test_the_record_says_what_changed():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    _, _, patched = run(pod, vmi)
    record = json.loads(patched["metadata"]["annotations"][RECORD_ANNOTATION])
    assert record["image"] == {"from": "quay.io/kubevirt/virt-launcher:v1.9.0", "to": IMAGE}
    assert record["command"]["from"] == "/usr/bin/virt-launcher-monitor"
    assert record["memoryOverheadBytes"]["kubevirt"] == 290 * MiB
    assert record["requests.memory"]["from"] == compute(pod)["resources"]["requests"]["memory"]


def test_a_second_pass_changes_nothing():
    vmi = the_vmi()
    _, _, patched = run(b.launcher_pod(vmi), vmi)
    response, verdict, again = run(patched, vmi)
    assert verdict == "unchanged" and "patch" not in response and again is None


def test_a_second_pass_after_another_mutator_restores_only_image_and_command():
    vmi = the_vmi()
    _, _, patched = run(b.launcher_pod(vmi), vmi)
    tampered = copy.deepcopy(patched)
    compute(tampered)["image"] = "quay.io/kubevirt/virt-launcher:v1.9.0"
    compute(tampered)["command"][0] = "/usr/bin/virt-launcher-monitor"
    _, verdict, restored = run(tampered, None)  # no VMI read needed
    assert verdict == "mutated"
    assert restored == patched


def test_a_migration_target_pod_is_mutated_the_same_way():
    vmi = the_vmi()
    response, verdict, patched = run(b.launcher_pod(vmi, migration=True), vmi)
    assert verdict == "mutated" and compute(patched)["image"] == IMAGE
    assert response["auditAnnotations"]["migration-target"] == "true"


def test_the_vmis_launcher_image_annotation_is_not_carried_into_a_new_pod():
    """virt-controller copies the VMI's annotations to the pods it renders; the one that names
    the image of the VMI's current pod would be wrong on a migration target."""
    vmi = the_vmi()
    vmi["metadata"]["annotations"]["kubevirt-ch.io/launcher-image"] = "ghcr.io/kubevirt-ch/ch-launcher:v0.0.9"
    pod = b.launcher_pod(vmi, migration=True)
    pod["metadata"]["annotations"]["kubevirt-ch.io/launcher-image"] = "ghcr.io/kubevirt-ch/ch-launcher:v0.0.9"
    _, verdict, patched = run(pod, vmi)
    assert verdict == "mutated" and "kubevirt-ch.io/launcher-image" not in patched["metadata"]["annotations"]


@pytest.mark.parametrize("change", ["label", "annotation", "ephemeral", "operation"])
def test_pods_that_are_not_ch_launcher_pods_are_left_alone(change):
    pod = b.launcher_pod(the_vmi())
    operation = "CREATE"
    if change == "label":
        pod["metadata"]["labels"]["kubevirt.io"] = "hotplug-disk"
    elif change == "annotation":
        del pod["metadata"]["annotations"]["kubevirt-ch.io/hypervisor"]
    elif change == "ephemeral":
        pod["metadata"]["annotations"]["kubevirt.io/ephemeral-provisioning"] = "true"
    else:
        operation = "UPDATE"
    outcome = plan(parse_review(b.review(pod, operation, old=pod, kind="Pod")), CONFIG)
    assert outcome.verdict == "ignored"
    assert "patch" not in outcome.review["response"]


def test_the_owner_is_found_by_reference_or_by_the_domain_annotation():
    pod = b.launcher_pod(the_vmi())
    needs = plan(parse_review(b.review(pod, kind="Pod", namespace="ns1", name="")), CONFIG)
    assert needs == NeedsVMI("ns1", "testvmi", "vmi-uid")
    del pod["metadata"]["ownerReferences"]
    assert plan(parse_review(b.review(pod, kind="Pod", namespace="ns1")), CONFIG) == NeedsVMI("ns1", "testvmi", "")
    del pod["metadata"]["annotations"]["kubevirt.io/domain"]
    outcome = plan(parse_review(b.review(pod, kind="Pod", namespace="ns1")), CONFIG)
    assert outcome.verdict == "denied"
    assert "names no owning VirtualMachineInstance" in outcome.review["response"]["status"]["message"]


def test_an_unreadable_vmi_fails_closed_with_the_reason():
    response, verdict, _ = run(b.launcher_pod(the_vmi()), None,
                               vmi_error="VirtualMachineInstance default/testvmi not found")
    assert verdict == "denied" and response["allowed"] is False
    assert "VirtualMachineInstance default/testvmi not found" in response["status"]["message"]


def test_a_pod_of_a_re_created_vmi_is_refused():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    vmi["metadata"]["uid"] = "another-uid"
    response, _, _ = run(pod, vmi)
    assert response["status"]["code"] == 409


def test_a_vmi_that_does_not_select_ch_is_not_guessed_at():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    del vmi["metadata"]["annotations"]["kubevirt-ch.io/hypervisor"]
    response, verdict, _ = run(pod, vmi)
    assert verdict == "denied" and "refusing to guess" in response["status"]["message"]


def test_a_vmi_the_translator_refuses_fails_closed_with_causes():
    vmi = b.undecodable_disks(the_vmi(), 2)
    response, verdict, _ = run(b.launcher_pod(vmi), vmi)
    assert verdict == "denied"
    assert [c["field"] for c in response["status"]["details"]["causes"]] == [
        "spec.domain.devices.disks[0].name", "spec.domain.devices.disks[1].name"]
    assert response["status"]["message"].startswith("VirtualMachineInstance default/testvmi: ")


def test_the_pod_of_a_vmi_with_a_host_device_the_kubevirt_cr_permits_as_usb_is_refused():
    """A VMI admitted before the resource was permitted as USB: its pod is refused with the same
    cause, not started to fail at launch."""
    vmi = b.with_devices(the_vmi(), hostDevices=[{"name": "stick", "deviceName": "kubevirt.io/storage"}])
    cr = {"spec": {"configuration": {"permittedHostDevices": {"usb": [{"resourceName": "kubevirt.io/storage"}]}}},
          "status": {"observedKubeVirtVersion": "v1.9.0"}}
    response, verdict, _ = run(b.launcher_pod(vmi), vmi, kubevirt=KubeVirtStatus.from_cr(cr))
    assert verdict == "denied"
    (cause,) = response["status"]["details"]["causes"]
    assert cause["field"] == "spec.domain.devices.hostDevices[0].deviceName"
    assert cause["message"].startswith("VirtualMachineInstance default/testvmi: spec.domain.devices.hostDevices[0]"
                                       ".deviceName 'kubevirt.io/storage' is not supported: it is a USB device")
    assert run(b.launcher_pod(vmi), vmi, kubevirt=KubeVirtStatus(version="v1.9.0"))[1] == "mutated"


def test_an_unsupported_kubevirt_version_refuses_the_pod():
    vmi = the_vmi()
    response, _, _ = run(b.launcher_pod(vmi), vmi, kubevirt=KubeVirtStatus(version="v1.12.0"))
    assert response["status"]["code"] == 403 and "v1.12.0" in response["status"]["message"]
    response, verdict, _ = run(b.launcher_pod(vmi), vmi, kubevirt=KubeVirtStatus(version="v1.9.2"))
    assert verdict == "mutated"


def test_binding_plugin_overheads_from_the_cluster_count_in_ours():
    vmi = the_vmi()
    vmi["spec"]["domain"]["devices"]["interfaces"] = [{"name": "default", "binding": {"name": "custom"}}]
    vmi["spec"]["networks"] = [{"name": "default", "pod": {}}]
    status = KubeVirtStatus(version="v1.9.0", bindings={"custom": 33 * MiB})
    _, _, patched = run(b.launcher_pod(vmi), vmi, kubevirt=status)
    expected = ch_overhead(parse_vmi(vmi), plan_of(parse_vmi(vmi)), bindings={"custom": 33 * MiB}).total
    assert patched["metadata"]["annotations"]["kubevirt.io/memory-overhead-bytes"] == str(expected)


def test_a_compute_command_that_is_not_virt_launcher_is_refused():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    compute(pod)["command"] = ["/bin/sh", "-c", "sleep 1"]
    response, verdict, _ = run(pod, vmi)
    assert verdict == "denied" and "'/bin/sh'" in response["status"]["message"]


def test_a_request_smaller_than_kubevirts_overhead_is_refused_rather_than_guessed():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    compute(pod)["resources"]["requests"]["memory"] = "100Mi"
    response, verdict, _ = run(pod, vmi)
    assert verdict == "denied" and "smaller than KubeVirt's overhead" in response["status"]["message"]


def test_a_pod_without_a_compute_container_is_refused():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    compute(pod)["name"] = "other"
    response, verdict, _ = run(pod, vmi)
    assert verdict == "denied" and "no 'compute' container" in response["status"]["message"]


def test_a_vmi_with_odd_metadata_is_refused_not_crashed_on():
    vmi = the_vmi()
    pod = b.launcher_pod(vmi)
    vmi["metadata"] = ["not", "an", "object"]
    response, verdict, _ = run(pod, vmi)
    assert verdict == "denied" and response["allowed"] is False


@pytest.mark.parametrize("obj, message", [
    ("a string", "request.object must be a JSON object (the object under admission), got a string"),
    ([b.launcher_pod(b.vmi(annotations=CH))], ("request.object must be a JSON object (the object under admission), "
                                               "got an array")),
])
@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", None])
def test_a_malformed_request_is_refused_clearly_whatever_its_operation(obj, message, operation):
    body = b.review(obj, kind="Pod", name="")
    body["request"]["operation"] = operation
    first = plan(parse_review(body), CONFIG)
    if operation is None:
        message = "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got None"
    assert first.verdict == "invalid"
    assert first.review["response"] == {"uid": body["request"]["uid"], "allowed": False,
                                        "status": {"message": message, "code": 400}}


@pytest.mark.parametrize("domain", [
    {"cpu": {"cores": 1, "dedicatedCpuPlacement": True}},
    {"devices": {"gpus": [{"name": "g", "deviceName": "nvidia.com/T4"}]}},
    {"memory": {"guest": "1Gi", "reservedOverhead": {"memLock": "Required"}}},
], ids=["dedicated", "gpu", "memLock"])
def test_a_vmi_virt_handlers_runtime_reaches_into_gets_the_launchers_runtime_process_tree(domain):
    # docs/process-model.md: monitor -> launcher -> virtqemud, the VMM under the monitor
    vmi = the_vmi()
    for key, value in domain.items():
        vmi["spec"]["domain"].setdefault(key, {}).update(value)
    pod = b.launcher_pod(vmi)
    _, verdict, patched = run(pod, vmi)
    assert verdict == "mutated"
    assert compute(patched)["command"] == [*CONFIG.launcher.command, "--kubevirt-runtime-processes",
                                           *compute(pod)["command"][1:]]
    assert run(patched, vmi)[1] == "unchanged"  # idempotent
    plain = the_vmi()
    assert "--kubevirt-runtime-processes" not in compute(run(b.launcher_pod(plain), plain)[2])["command"]

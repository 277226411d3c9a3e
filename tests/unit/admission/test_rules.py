"""The validating webhook's decisions, as a pure function of the AdmissionReview."""

from __future__ import annotations

import copy

import pytest

from admission.cluster import KubeVirtStatus
from admission.config import load_config
from admission.review import parse_review
from admission.rules import HOST_DEVICES_MAX_AGE, validate, wants_kubevirt_status
from admission.selection import ANNOTATION
from ch_launcher.convert import PermittedHostDevices
from tests.unit.admission import builders as b
from tests.unit.admission.builders import CH

CONFIG = load_config()


def decide(body, kubevirt=None):
    outcome = validate(parse_review(body), CONFIG, kubevirt)
    return outcome.review["response"], outcome.verdict


def causes(response):
    return response["status"]["details"]["causes"]


def test_an_annotated_vmi_cloud_hypervisor_runs_is_allowed():
    response, verdict = decide(b.review(b.vmi(annotations=CH)))
    assert response["allowed"] is True
    assert verdict in ("allowed", "warned")


@pytest.mark.parametrize("annotations", [None, {}, {ANNOTATION: "qemu"}, {ANNOTATION: "Cloud-Hypervisor"}])
def test_objects_without_the_selection_are_allowed_untouched(annotations):
    bad = b.undecodable_disks(b.vmi(annotations=annotations), 3)
    response, verdict = decide(b.review(bad))
    assert response == {"uid": response["uid"], "allowed": True}
    assert verdict == "ignored"


def test_every_problem_is_a_cause_with_its_field_path():
    response, verdict = decide(b.review(b.undecodable_disks(b.vmi(annotations=CH), 3)))
    assert verdict == "denied"
    assert response["allowed"] is False
    assert response["status"]["code"] == 422 and response["status"]["reason"] == "Invalid"
    assert [c["field"] for c in causes(response)] == [f"spec.domain.devices.disks[{i}].name" for i in range(3)]
    assert all(c["type"] == "FieldValueInvalid" for c in causes(response))
    assert "spec.domain.devices.disks[2].name" in response["status"]["message"]


def test_more_than_ten_problems_are_capped_at_ten_with_the_rest_counted():
    response, _ = decide(b.review(b.undecodable_disks(b.vmi(annotations=CH), 14)))
    assert len(causes(response)) == 10
    assert response["status"]["message"].endswith(", and 4 more validation errors")


@pytest.mark.parametrize(("wrap", "prefix"), [
    (b.vm, "spec.template."),
    (b.replicaset, "spec.template."),
    (b.pool, "spec.virtualMachineTemplate.spec.template."),
])
def test_owners_are_checked_through_their_template_with_prefixed_paths(wrap, prefix):
    response, verdict = decide(b.review(wrap(b.undecodable_disks(b.vmi(annotations=CH), 2))))
    assert verdict == "denied"
    assert [c["field"] for c in causes(response)] == [f"{prefix}spec.domain.devices.disks[{i}].name" for i in (0, 1)]
    assert response["status"]["message"].startswith(f"{prefix}spec.domain.devices.disks[0].name")


def test_an_owner_without_the_selection_is_not_checked():
    response, verdict = decide(b.review(b.vm(b.undecodable_disks(b.vmi(), 2))))
    assert response["allowed"] is True and verdict == "ignored"


def test_an_annotation_on_the_vm_itself_is_checked_and_warned_about():
    obj = b.vm(b.vmi(), annotations=CH)
    response, verdict = decide(b.review(obj))
    assert response["allowed"] is True and verdict == "warned"
    assert any("spec.template.metadata.annotations" in w for w in response["warnings"])
    bad = b.vm(b.undecodable_disks(b.vmi(), 1), annotations=CH)
    assert decide(b.review(bad))[0]["allowed"] is False


@pytest.mark.parametrize(("where", "field"), [((), "metadata.annotations"),
                                               (("spec", "virtualMachineTemplate"),
                                                "spec.virtualMachineTemplate.metadata.annotations")])
def test_the_warning_names_where_a_pool_carries_the_annotation_and_where_it_belongs(where, field):
    obj = b.pool(b.vmi())
    node = obj
    for key in where:
        node = node[key]
    node.setdefault("metadata", {})["annotations"] = dict(CH)
    response, verdict = decide(b.review(obj))
    assert verdict == "warned"
    assert (f"{ANNOTATION} in {field} does not reach the VirtualMachinePool's VMIs: set it in "
            f"spec.virtualMachineTemplate.spec.template.metadata.annotations") in response["warnings"][0]


def test_a_template_whose_spec_is_not_an_object_is_refused_at_the_prefixed_path():
    obj = b.vm(b.vmi(annotations=CH))
    obj["spec"]["template"]["spec"] = "not an object"
    (cause,) = causes(decide(b.review(obj))[0])
    assert cause["field"] == "spec.template.spec"
    assert cause["message"].startswith("spec.template.spec: ")


def test_a_vmi_without_memory_is_refused_with_a_field_path():
    vmi = b.vmi(annotations=CH)
    del vmi["spec"]["domain"]["resources"]
    response, verdict = decide(b.review(vmi))
    assert verdict == "denied"
    assert [(c["type"], c["field"]) for c in causes(response)] == [("FieldValueRequired", "spec.domain.memory.guest")]


@pytest.mark.parametrize("wrap", [b.vm, b.replicaset, b.pool])
def test_a_template_without_memory_is_allowed_as_kubevirt_allows_it(wrap):
    """What `virtctl create vm --instancetype` writes: the size comes from the instancetype when
    the VMI is created (and is checked then); KubeVirt asks for memory on VMIs only."""
    vmi = b.vmi(annotations=CH)
    del vmi["spec"]["domain"]["resources"]
    response, _ = decide(b.review(wrap(vmi)))
    assert response["allowed"] is True, response
    assert not any("memory" in w for w in response.get("warnings", []))


def test_an_owner_without_a_template_is_refused_for_the_missing_template():
    obj = b.vm(b.vmi(), annotations=CH)
    del obj["spec"]["template"]
    response, _ = decide(b.review(obj))
    assert causes(response) == [{"type": "FieldValueRequired", "message": "spec.template is a required field",
                                 "field": "spec.template"}]


# --- UPDATE -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("before", "after"), [
    (None, CH), (CH, None), (CH, {ANNOTATION: "qemu"}), ({ANNOTATION: "qemu"}, CH),
])
def test_the_backend_of_an_existing_vmi_cannot_change(before, after):
    old, new = b.vmi(annotations=before), b.vmi(annotations=after)
    response, verdict = decide(b.review(new, "UPDATE", old))
    assert verdict == "denied"
    cause, = causes(response)
    assert cause["field"] == "metadata.annotations[kubevirt-ch.io/hypervisor]"
    assert "cannot change" in cause["message"]


def test_other_annotation_changes_on_unselected_vmis_are_not_ours():
    old, new = b.vmi(annotations={ANNOTATION: "a"}), b.vmi(annotations={ANNOTATION: "b"})
    assert decide(b.review(new, "UPDATE", old))[1] == "ignored"


def test_kubevirts_metadata_updates_are_never_refused_even_for_a_vmi_we_would_deny():
    old = b.undecodable_disks(b.vmi(annotations=CH), 3)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"kubevirt.io/outdatedLauncherImage": ""}
    new["metadata"]["finalizers"] = []
    new["metadata"]["annotations"]["kubevirt.io/latest-observed-api-version"] = "v1"
    response, verdict = decide(b.review(new, "UPDATE", old))
    assert response["allowed"] is True and verdict == "ignored"


def test_an_object_being_deleted_is_always_allowed():
    old = b.vmi(annotations=CH)
    new = b.undecodable_disks(b.vmi(annotations=None), 2)
    new["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert decide(b.review(new, "UPDATE", old))[0]["allowed"] is True


def test_a_spec_change_is_checked_again():
    old = b.vmi(annotations=CH)
    new = b.undecodable_disks(b.vmi(annotations=CH), 1)
    assert decide(b.review(new, "UPDATE", old))[1] == "denied"


def test_a_vm_template_change_is_checked_but_its_status_and_labels_are_not():
    old = b.vm(b.undecodable_disks(b.vmi(annotations=CH), 1))
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"x": "y"}
    relabelled["status"] = {"printableStatus": "Running"}
    assert decide(b.review(relabelled, "UPDATE", old))[1] == "ignored"
    fixed_then_broken = b.vm(b.undecodable_disks(b.vmi(annotations=CH), 2))
    assert decide(b.review(fixed_then_broken, "UPDATE", old))[1] == "denied"


def test_selecting_a_vm_for_cloud_hypervisor_on_update_is_checked():
    old = b.vm(b.undecodable_disks(b.vmi(), 1))
    new = b.vm(b.undecodable_disks(b.vmi(annotations=CH), 1))
    assert decide(b.review(new, "UPDATE", old))[1] == "denied"


def test_an_update_without_an_old_object_is_refused_only_for_a_selected_object():
    old = None
    response, verdict = decide(b.review(b.vmi(annotations=CH), "UPDATE", old))
    assert verdict == "invalid" and response["status"] == {
        "message": "request.oldObject must be a VirtualMachineInstance object on UPDATE", "code": 400}
    response, verdict = decide(b.review(b.vm(b.vmi()), "UPDATE", old))
    assert response == {"uid": response["uid"], "allowed": True} and verdict == "ignored"


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed(operation):
    response, verdict = decide(b.review(None, operation, b.vmi(annotations=CH), kind="VirtualMachineInstance"))
    assert response["allowed"] is True and verdict == "ignored"


def test_a_dry_run_gets_the_same_answer():
    obj = b.undecodable_disks(b.vmi(annotations=CH), 2)
    real, _ = decide(b.review(obj))
    dry, _ = decide(b.review(obj, dry_run=True))
    assert {k: v for k, v in dry.items() if k != "uid"} == {k: v for k, v in real.items() if k != "uid"}


def test_an_object_that_is_not_an_object_is_a_400():
    response, verdict = decide(b.review([1, 2], kind="VirtualMachineInstance"))
    assert verdict == "invalid"
    assert response["status"]["code"] == 400


MALFORMED = [
    # (request changes, message): refused whatever the kind, before anything else
    ({"object": [b.vmi(annotations=CH)]}, ("request.object must be a JSON object (the object under admission), "
                                           "got an array")),
    ({"object": "a string"}, "request.object must be a JSON object (the object under admission), got a string"),
    ({"operation": "UPDATE", "oldObject": "a string"},
     "request.oldObject must be a JSON object (the object under admission), got a string"),
    ({"operation": None}, "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got None"),
    ({"operation": "PATCH"}, "request.operation must be one of CREATE, UPDATE, DELETE, CONNECT, got 'PATCH'"),
    ({"object": None}, "request.object is missing on CREATE"),
]


@pytest.mark.parametrize("changes, message", MALFORMED)
@pytest.mark.parametrize("kind", [None, "VirtualMachineInstance", "Pod", "ConfigMap"])
def test_a_malformed_request_is_refused_clearly_whatever_its_kind(changes, message, kind):
    body = b.review(b.vmi(annotations=CH))
    body["request"].update(changes)
    if kind is None:
        del body["request"]["kind"], body["request"]["resource"]
    else:
        body["request"]["kind"]["kind"] = kind
    response, verdict = decide(body)
    assert verdict == "invalid"
    assert response == {"uid": body["request"]["uid"], "allowed": False, "status": {"message": message, "code": 400}}


def test_a_request_without_kinds_is_judged_by_its_resource():
    body = b.review(b.pool(b.undecodable_disks(b.vmi(annotations=CH), 1)))
    del body["request"]["kind"], body["request"]["requestKind"], body["request"]["object"]["kind"]
    response, verdict = decide(body)
    assert verdict == "denied"
    assert causes(response)[0]["field"] == "spec.virtualMachineTemplate.spec.template.spec.domain.devices.disks[0].name"


def test_kinds_we_do_not_validate_are_allowed():
    response, verdict = decide(b.review({"kind": "ConfigMap", "metadata": {"annotations": CH}}, kind="ConfigMap"))
    assert response["allowed"] is True and verdict == "ignored"


# --- KubeVirt version gate ---------------------------------------------------------------------


def test_a_new_ch_vmi_is_refused_on_an_unsupported_kubevirt():
    body = b.review(b.vmi(annotations=CH))
    assert wants_kubevirt_status(parse_review(body))
    response, verdict = decide(body, KubeVirtStatus(version="v1.11.0"))
    assert verdict == "denied"
    cause, = causes(response)
    assert cause["field"] == "metadata.annotations[kubevirt-ch.io/hypervisor]"
    assert "KubeVirt v1.11.0" in cause["message"] and ">=1.8.0, <1.10.0" in cause["message"]


def test_an_unreadable_kubevirt_version_fails_closed_for_ch_objects():
    response, _ = decide(b.review(b.vm(b.vmi(annotations=CH))), KubeVirtStatus(error="connection refused"))
    cause, = causes(response)
    assert cause["field"] == "spec.template.metadata.annotations[kubevirt-ch.io/hypervisor]"
    assert "connection refused" in cause["message"]


def test_a_supported_kubevirt_lets_ch_vmis_through():
    response, _ = decide(b.review(b.vmi(annotations=CH)), KubeVirtStatus(version="v1.9.0"))
    assert response["allowed"] is True


def test_the_version_gate_never_touches_unselected_objects_or_updates():
    assert not wants_kubevirt_status(parse_review(b.review(b.vmi())))
    assert decide(b.review(b.vmi()), KubeVirtStatus(version="v9.0.0"))[0]["allowed"] is True
    old = b.vmi(annotations=CH)
    new = b.vmi(annotations=CH, terminationGracePeriodSeconds=5)
    assert wants_kubevirt_status(parse_review(b.review(new, "UPDATE", old)))  # for its host devices
    assert decide(b.review(new, "UPDATE", old), KubeVirtStatus(version="v9.0.0"))[0]["allowed"] is True


def test_the_kubevirt_status_is_not_read_for_updates_that_are_not_judged():
    old = b.vmi(annotations=CH)
    relabelled = copy.deepcopy(old)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert wants_kubevirt_status(parse_review(b.review(relabelled, "UPDATE", old))) is None
    deleting = copy.deepcopy(old)
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleting["spec"]["terminationGracePeriodSeconds"] = 5
    assert wants_kubevirt_status(parse_review(b.review(deleting, "UPDATE", old))) is None
    assert wants_kubevirt_status(parse_review(b.review(old, "DELETE"))) is None


# --- host devices the KubeVirt CR permits as USB ------------------------------------------------

USB = "kubevirt.io/storage"
PCI = "nvidia.com/TU104GL_Tesla_T4"
USB_CR = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
          "spec": {"configuration": {"permittedHostDevices": {
              "pciHostDevices": [{"pciVendorSelector": "10DE:1EB8", "resourceName": PCI}],
              "usb": [{"resourceName": USB, "selectors": [{"vendor": "46f4", "product": "0001"}]},
                      {"resourceName": "example.org/external-usb", "externalResourceProvider": True}]}}},
          "status": {"observedKubeVirtVersion": "v1.9.0"}}
USB_MESSAGE = ("spec.domain.devices.hostDevices[1].deviceName 'kubevirt.io/storage' is not supported: it is a USB "
               "device (permittedHostDevices.usb of the KubeVirt CR) and Cloud Hypervisor has no USB controller")


def with_host_devices(*resources: str) -> dict:
    return b.with_devices(b.vmi(annotations=CH), autoattachGraphicsDevice=False,
                          hostDevices=[{"name": f"h{i}", "deviceName": r} for i, r in enumerate(resources)])


@pytest.mark.parametrize(("wrap", "prefix"), [
    (lambda o: o, ""),
    (b.vm, "spec.template."),
    (b.replicaset, "spec.template."),
    (b.pool, "spec.virtualMachineTemplate.spec.template."),
])
def test_a_host_device_the_kubevirt_cr_permits_as_usb_is_refused_at_its_device_name(wrap, prefix):
    body = b.review(wrap(with_host_devices(PCI, USB)))
    assert wants_kubevirt_status(parse_review(body)).max_age == HOST_DEVICES_MAX_AGE
    response, verdict = decide(body, KubeVirtStatus.from_cr(USB_CR))
    assert verdict == "denied"
    assert causes(response) == [{"type": "FieldValueNotSupported", "message": prefix + USB_MESSAGE,
                                 "field": f"{prefix}spec.domain.devices.hostDevices[1].deviceName"}]
    assert response["status"]["message"] == prefix + USB_MESSAGE
    assert "warnings" not in response  # the PCI one is known to be PCI: nothing to warn about


def test_a_usb_resource_of_an_external_device_plugin_is_refused_too():
    response, _ = decide(b.review(with_host_devices("example.org/external-usb")), KubeVirtStatus.from_cr(USB_CR))
    assert [c["field"] for c in causes(response)] == ["spec.domain.devices.hostDevices[0].deviceName"]


def test_an_update_that_adds_a_usb_host_device_is_refused_and_one_that_keeps_it_too():
    old = b.vm(b.vmi(annotations=CH))
    new = b.vm(with_host_devices(USB))
    kubevirt = KubeVirtStatus.from_cr(USB_CR)
    response, _ = decide(b.review(new, "UPDATE", old), kubevirt)
    assert [c["field"] for c in causes(response)] == ["spec.template.spec.domain.devices.hostDevices[0].deviceName"]
    changed = copy.deepcopy(new)
    changed["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 5
    assert decide(b.review(changed, "UPDATE", new), kubevirt)[0]["allowed"] is False
    relabelled = copy.deepcopy(new)
    relabelled["metadata"]["labels"] = {"a": "b"}
    assert decide(b.review(relabelled, "UPDATE", new), kubevirt)[0]["allowed"] is True  # not judged again


def test_without_the_kubevirt_cr_a_host_device_is_admitted_with_the_warning():
    response, verdict = decide(b.review(with_host_devices(USB)))
    assert (response["allowed"], verdict) == (True, "warned")
    assert response["warnings"] == [("spec.domain.devices.hostDevices[0]: kubevirt.io/storage must be a PCI or "
                                     "mediated device: a USB one fails the start (Cloud Hypervisor has no USB)")]


def test_an_unreadable_kubevirt_cr_knows_no_usb_device_and_its_gate_refuses_on_create_only():
    unreadable = KubeVirtStatus(error="connection refused")
    response, _ = decide(b.review(with_host_devices(USB)), unreadable)
    assert [c["field"] for c in causes(response)] == ["metadata.annotations[kubevirt-ch.io/hypervisor]"]
    old = b.vmi(annotations=CH)
    response, verdict = decide(b.review(with_host_devices(USB), "UPDATE", old), unreadable)
    assert (response["allowed"], verdict) == (True, "warned")


def test_the_permitted_host_devices_are_read_from_the_kubevirt_cr_whatever_it_holds():
    devices = KubeVirtStatus.from_cr(USB_CR).host_devices
    assert devices == PermittedHostDevices(pci=frozenset({PCI}), usb=frozenset({USB, "example.org/external-usb"}))
    odd = {"spec": {"configuration": {"permittedHostDevices": {
        "usb": [{"resourceName": 3}, "kubevirt.io/storage", {"selectors": []}, {"resourceName": ""},
                {"resourceName": USB}],
        "mediatedDevices": {"resourceName": "not-a-list"}}}}}
    assert KubeVirtStatus.from_cr(odd).host_devices == PermittedHostDevices(usb=frozenset({USB}))
    assert KubeVirtStatus.from_cr({"spec": {"configuration": {"permittedHostDevices": None}}}).host_devices == \
        PermittedHostDevices()
    assert KubeVirtStatus(error="not found").host_devices == PermittedHostDevices()


def test_offline_without_the_version_gate_the_crs_usb_devices_still_count():
    hand_written = {"spec": USB_CR["spec"]}  # no status: no version
    outcome = validate(parse_review(b.review(with_host_devices(USB))), CONFIG, KubeVirtStatus.from_cr(hand_written),
                       version_gate=False)
    assert [c["field"] for c in causes(outcome.review["response"])] == [
        "spec.domain.devices.hostDevices[0].deviceName"]


# --- KubeVirt's workload updater -----------------------------------------------------------------


@pytest.mark.parametrize("methods", [["LiveMigrate"], ["LiveMigrate", "Evict"], ["Evict"]])
def test_no_vmi_is_warned_about_the_clusters_workload_update_methods(methods):
    """A cluster-wide setting its author can do nothing about: reported to operators
    (admission/report.py), not on every VMI."""
    body = b.review(b.vmi(annotations=CH))
    response, verdict = decide(body, KubeVirtStatus(version="v1.9.0", update_methods=tuple(methods)))
    baseline, baseline_verdict = decide(body, KubeVirtStatus(version="v1.9.0"))
    assert response["allowed"] is True and verdict == baseline_verdict
    assert response.get("warnings") == baseline.get("warnings")
    assert not any("workloadUpdate" in w for w in response.get("warnings", []))


def test_the_update_methods_are_read_from_the_kubevirt_cr():
    cr = {"spec": {"workloadUpdateStrategy": {"workloadUpdateMethods": ["Evict"]}},
          "status": {"observedKubeVirtVersion": "v1.9.0"}}
    assert KubeVirtStatus.from_cr(cr).update_methods == ("Evict",)


def _with_hotplugged_volume(obj):
    """What `virtctl addvolume --volume-name=data-dv` adds (bus scsi, serial = the name)."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]["template"]["spec"] if obj["kind"] == "VirtualMachine" else obj["spec"]
    spec["domain"]["devices"]["disks"].append({"name": "a-data-volume-longer-than-20", "disk": {"bus": "scsi"},
                                               "serial": "a-data-volume-longer-than-20"})
    spec["volumes"].append({"name": "a-data-volume-longer-than-20",
                            "dataVolume": {"name": "data-dv", "hotpluggable": True}})
    return obj


@pytest.mark.parametrize("wrap", [lambda v: v, b.vm], ids=["vmi", "vm"])
def test_virtctl_addvolume_on_a_running_vm_is_allowed_with_warnings_for_its_bus_and_serial(wrap):
    old = wrap(b.vmi(annotations=CH))
    response, verdict = decide(b.review(_with_hotplugged_volume(old), "UPDATE", old))
    assert response["allowed"] is True and verdict == "warned"
    warnings = " ".join(response["warnings"])
    assert "disk.bus 'scsi' of a hotplugged disk is attached as virtio-blk" in warnings
    assert "is truncated to 'a-data-volume-longer'" in warnings


# --- the cluster's default eviction strategy (KubeVirt CR spec.configuration.evictionStrategy) ---
# virt-api writes it into every new VMI without its own (pkg/defaults/defaults.go:
# setDefaultEvictionStrategy) before the webhooks see it, but not into owners' templates.

def drain_warnings(response):
    return [w for w in response.get("warnings", []) if "a node drain would block on it" in w]


@pytest.mark.parametrize("default", ["LiveMigrate", "LiveMigrateIfPossible"])
def test_a_template_that_cannot_migrate_and_would_take_the_clusters_migrating_default_is_warned(default):
    kubevirt = KubeVirtStatus(version="v1.9.0", eviction_strategy=default)
    response, verdict = decide(b.review(b.vm(b.vmi(annotations=CH))), kubevirt)
    assert response["allowed"] is True and verdict == "warned"
    assert drain_warnings(response) == [
        (f"spec.template.spec.evictionStrategy is not set, so virt-api will set the cluster's default {default} "
         "(the KubeVirt CR's configuration.evictionStrategy) in the VMI, which is then refused: Cloud Hypervisor "
         "cannot live-migrate it (DisksNotLiveMigratable: volume 'containerdisk' (containerDisk) is local to the pod "
         "and writable: Cloud Hypervisor cannot copy disks during a migration), so a node drain would block on it; "
         "set None (the VM stops on a drain) or External, or make the VMI migratable")]


def test_a_vmi_given_the_clusters_migrating_default_is_refused_saying_where_it_came_from():
    vmi = b.vmi(annotations=CH, evictionStrategy="LiveMigrate")  # as virt-api defaulted it
    response, verdict = decide(b.review(vmi), KubeVirtStatus(version="v1.9.0", eviction_strategy="LiveMigrate"))
    assert verdict == "denied"
    assert causes(response)[0]["message"].startswith(
        "spec.evictionStrategy is not supported: LiveMigrate (the cluster's default, the KubeVirt CR's "
        "configuration.evictionStrategy, which virt-api sets in every VMI without its own): Cloud Hypervisor "
        "cannot live-migrate this VMI (DisksNotLiveMigratable: ")
    other = decide(b.review(vmi), KubeVirtStatus(version="v1.9.0", eviction_strategy="None"))[0]
    assert causes(other)[0]["message"].startswith(
        "spec.evictionStrategy is not supported: LiveMigrate: Cloud Hypervisor cannot live-migrate"), "its own"


@pytest.mark.parametrize("default, own, migratable", [
    ("None", None, False), ("External", None, False), ("", None, False),   # the default does not migrate
    ("LiveMigrate", "None", False), ("LiveMigrate", "External", False),   # the template's own strategy wins
    ("LiveMigrate", None, True),                                           # it can migrate
])
def test_no_drain_warning_when_the_default_does_not_apply_or_does_not_block(default, own, migratable):
    vmi = b.vmi(annotations=CH) if not migratable else b.vmi(annotations=CH, volumes=[])
    if migratable:
        vmi["spec"]["domain"]["devices"] = {"disks": [], "autoattachPodInterface": False}
    if own is not None:
        vmi["spec"]["evictionStrategy"] = own
    response, _ = decide(b.review(b.vm(vmi)), KubeVirtStatus(version="v1.9.0", eviction_strategy=default))
    assert response["allowed"] is True and drain_warnings(response) == [], response


def test_the_default_eviction_strategy_is_read_from_the_kubevirt_cr():
    cr = {"spec": {"configuration": {"evictionStrategy": "LiveMigrate"}},
          "status": {"observedKubeVirtVersion": "v1.9.0"}}
    assert KubeVirtStatus.from_cr(cr).eviction_strategy == "LiveMigrate"
    assert KubeVirtStatus.from_cr({"status": {"observedKubeVirtVersion": "v1.9.0"}}).eviction_strategy == ""

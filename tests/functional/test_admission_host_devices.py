"""Which host devices are USB is what the cluster's KubeVirt CR says, as the CR says it now: a
real `ch-admission serve` against a fake API server whose KubeVirt CR permits a USB device
(tests/apiserver/test_host_devices.py does the same through a real API server and kubectl)."""

from __future__ import annotations

import time

import pytest

from tests.fakes.fake_kube_api import FakeKubeAPI
from tests.functional.admission_harness import CONFIG, AdmissionServer, post_review
from tests.unit.admission import builders as b

USB = "kubevirt.io/storage"
KUBEVIRT_CR = "/apis/kubevirt.io/v1/namespaces/kubevirt/kubevirts/kubevirt"
AS_USB = {"usb": [{"resourceName": USB, "selectors": [{"vendor": "46f4", "product": "0001"}]}]}
AS_PCI = {"pciHostDevices": [{"pciVendorSelector": "1AF4:1001", "resourceName": USB}]}
MESSAGE = ("spec.domain.devices.hostDevices[0].deviceName 'kubevirt.io/storage' is not supported: it is a USB device "
           "(permittedHostDevices.usb of the KubeVirt CR) and Cloud Hypervisor has no USB controller")


def with_usb_stick(obj=None):
    obj = obj or b.vmi(annotations=b.CH)
    return b.with_devices(obj, autoattachGraphicsDevice=False,
                          hostDevices=[{"name": "stick", "deviceName": USB}])


@pytest.fixture
def api(tmp_path):
    fake = FakeKubeAPI().start(tmp_path)
    fake.add_kubevirt("v1.9.0", permitted_host_devices=AS_USB)
    yield fake
    fake.stop()


@pytest.fixture
def server(api, tls):
    s = AdmissionServer(["--tls-cert-file", str(tls["cert"]), "--tls-private-key-file", str(tls["key"]),
                         "--config", str(CONFIG), "--kubeconfig", api.kubeconfig, "--namespace", "kubevirt-ch"]).start()
    yield s
    assert s.stop() == 0, "\n".join(s.log)


def test_a_host_device_the_kubevirt_cr_permits_as_usb_is_refused_on_create_and_update(server, https):
    answer = post_review(https, server.url, b.review(with_usb_stick()))
    assert answer["allowed"] is False
    assert answer["status"] == {"message": MESSAGE, "reason": "Invalid", "code": 422,
                                "details": {"causes": [{"type": "FieldValueNotSupported", "message": MESSAGE,
                                                        "field": "spec.domain.devices.hostDevices[0].deviceName"}]}}
    answer = post_review(https, server.url, b.review(b.pool(with_usb_stick())))
    prefix = "spec.virtualMachineTemplate.spec.template."
    assert [(c["field"], c["message"]) for c in answer["status"]["details"]["causes"]] == [
        (f"{prefix}spec.domain.devices.hostDevices[0].deviceName", prefix + MESSAGE)]
    vm = b.vm(b.vmi(annotations=b.CH))
    answer = post_review(https, server.url, b.review(b.vm(with_usb_stick()), "UPDATE", vm))  # a USB stick added
    assert answer["allowed"] is False
    field = answer["status"]["details"]["causes"][0]["field"]
    assert field == "spec.template.spec.domain.devices.hostDevices[0].deviceName"
    assert post_review(https, server.url, b.review(b.vmi()))["allowed"] is True  # QEMU VMIs are not ours


def test_the_kubevirt_cr_is_read_again_for_host_devices_when_it_changes_while_the_server_runs(api, server, https):
    """The operator moves the resource from `usb` to `pciHostDevices`: within HOST_DEVICES_MAX_AGE
    the same VMI is admitted, without the warning (the CR says it is PCI); VMIs without host
    devices do not make the server read the CR again."""
    assert post_review(https, server.url, b.review(with_usb_stick()))["allowed"] is False
    reads = api.count("GET", KUBEVIRT_CR)
    for _ in range(5):
        assert post_review(https, server.url, b.review(b.vmi(annotations=b.CH)))["allowed"] is True
    assert api.count("GET", KUBEVIRT_CR) == reads

    api.add_kubevirt("v1.9.0", permitted_host_devices=AS_PCI)
    changed = time.monotonic()
    deadline = changed + 20
    while (answer := post_review(https, server.url, b.review(with_usb_stick())))["allowed"] is False:
        assert time.monotonic() < deadline, "the server did not read the changed KubeVirt CR"
        time.sleep(0.1)
    assert time.monotonic() - changed < 5 + 2  # HOST_DEVICES_MAX_AGE, and a read's round trip
    assert "warnings" not in answer

    api.add_kubevirt("v1.9.0")  # no permittedHostDevices at all: the kind is not known
    while "warnings" not in (answer := post_review(https, server.url, b.review(with_usb_stick()))):
        assert time.monotonic() < deadline + 20, "the server did not read the changed KubeVirt CR"
        time.sleep(0.1)
    assert answer["allowed"] is True
    assert answer["warnings"] == [("spec.domain.devices.hostDevices[0]: kubevirt.io/storage must be a PCI or mediated "
                                   "device: a USB one fails the start (Cloud Hypervisor has no USB)")]

import pytest
import yaml

from ch_launcher.kubevirt.vmi import InvalidVMI, parse_vmi
from tests.conftest import KUBEVIRT_EXAMPLES, require_shared


def test_every_kubevirt_example_vmi_decodes():
    require_shared(KUBEVIRT_EXAMPLES)
    seen = 0
    for f in sorted(KUBEVIRT_EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc and doc.get("kind") == "VirtualMachineInstance":
                vmi = parse_vmi(doc)
                assert vmi.metadata.name == doc["metadata"]["name"]
                seen += 1
    assert seen >= 20


def test_unknown_fields_are_ignored_and_nulls_mean_absent():
    vmi = parse_vmi({"spec": {"futureField": 1, "domain": {"devices": {"rng": None, "disks": None}}}})
    assert vmi.spec.domain.devices.rng is None
    assert vmi.spec.domain.devices.disks == []


def test_presence_blocks_are_kept():
    vmi = parse_vmi({"spec": {"domain": {"devices": {"rng": {}, "interfaces": [{"name": "a", "masquerade": {}}]}}}})
    assert vmi.spec.domain.devices.rng is not None
    assert vmi.spec.domain.devices.interfaces[0].binding_method == "masquerade"


def test_a_malformed_vmi_names_every_bad_field_path():
    with pytest.raises(InvalidVMI) as e:
        parse_vmi({"spec": {"domain": {"cpu": {"cores": "x"}, "devices": {"disks": [{"name": "a"}, {"disk": {}}]}}}})
    paths = [p for p, _ in e.value.causes]
    assert paths == ["spec.domain.cpu.cores", "spec.domain.devices.disks[1].name"]


@pytest.mark.parametrize("payload,words",
                         [(b"{", "not valid JSON"), (b"[1]", "JSON object"), (b"\xff", "not valid JSON"),
                                           (b"[" * 100_000, "nested too deeply")])
def test_payloads_that_are_not_objects_are_invalid_vmi(payload, words):
    with pytest.raises(InvalidVMI, match=words):
        parse_vmi(payload)


@pytest.mark.parametrize("value", [True, [1], {"a": 1}, None])
def test_a_quantity_of_the_wrong_type_is_one_cause_at_its_exact_path(value):
    with pytest.raises(InvalidVMI) as e:
        parse_vmi({"spec": {"domain": {"resources": {"requests": {"memory": value}}}}})
    assert [p for p, _ in e.value.causes] == ["spec.domain.resources.requests.memory"]


def test_a_map_key_named_like_a_type_stays_in_the_path():
    with pytest.raises(InvalidVMI) as e:
        parse_vmi({"metadata": {"labels": {"int": 5}}})
    assert [p for p, _ in e.value.causes] == ["metadata.labels[int]"]


def test_map_keys_in_error_paths_read_as_kubernetes_writes_them():
    with pytest.raises(InvalidVMI) as e:
        parse_vmi({"metadata": {"annotations": {"a": 5, 7: "x"}}})
    assert sorted(p for p, _ in e.value.causes) == ["metadata.annotations[7]", "metadata.annotations[a]"]
    with pytest.raises(InvalidVMI) as e:
        parse_vmi({"spec": {"domain": {"resources": {"requests": {"memory": [1]}}}}})
    assert [p for p, _ in e.value.causes] == ["spec.domain.resources.requests.memory"]

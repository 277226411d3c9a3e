"""`ch-admission check` and `ch-admission overhead` on files."""

from __future__ import annotations

import copy
import io
import json
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from admission.cli import main, parse_args
from admission.offline import check_main, overhead_main
from tests.conftest import KUBEVIRT_EXAMPLES, require_shared
from tests.unit.admission import builders as b


def run(argv):
    ns = parse_args(argv)
    out = io.StringIO()
    code = (check_main if ns.command == "check" else overhead_main)(ns, out)
    return code, out.getvalue()


def test_check_prints_each_verdict_with_field_paths_and_exits_1_on_a_denial(tmp_path):
    path = tmp_path / "objs.yaml"
    path.write_text(yaml.safe_dump_all([b.vmi(annotations=b.CH), b.vm(b.undecodable_disks(b.vmi(annotations=b.CH), 2)),
                                        b.vmi(name="plain"), {"apiVersion": "v1", "kind": "ConfigMap"}]))
    code, out = run(["check", str(path)])
    assert code == 1
    assert f"{path}#0: VirtualMachineInstance testvmi: allowed" in out
    assert f"{path}#1: VirtualMachine testvm: DENIED" in out
    assert "  spec.template.spec.domain.devices.disks[1].name: FieldValueInvalid:" in out
    assert "VirtualMachineInstance plain: not selected" in out
    assert out.rstrip().endswith("2 checked, 1 denied")


def test_check_reads_json_and_lists_and_exits_0_when_all_pass(tmp_path):
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List",
                                "items": [b.vmi(annotations=b.CH), b.pool(b.vmi(annotations=b.CH))]}))
    code, out = run(["check", str(path)])
    assert code == 0 and "2 checked, 0 denied" in out


def test_check_all_treats_unannotated_examples_as_selected():
    path = require_shared(KUBEVIRT_EXAMPLES / "vmi-windows.yaml")
    code, out = run(["check", "--all", str(path)])
    assert code == 1 and "spec.domain.devices.interfaces[0].model" in out


def test_check_shows_the_tail_beyond_ten_causes(tmp_path):
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(b.undecodable_disks(b.vmi(annotations=b.CH), 12)))
    _, out = run(["check", str(path)])
    assert "  ... 2 more validation errors" in out


@pytest.mark.parametrize("content", ["key: [unclosed", None])
def test_unreadable_files_are_exit_2_with_the_file_named(tmp_path, capsys, content):
    path = tmp_path / "bad.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["check", str(path)]) == 2
    assert str(path) in capsys.readouterr().err


def test_overhead_on_vmi_fedora_is_at_most_a_third_of_kubevirts():
    code, out = run(["overhead", str(require_shared(KUBEVIRT_EXAMPLES / "vmi-fedora.yaml"))])
    assert code == 0
    total = re.search(r"^total\s+([\d.]+)\s+([\d.]+)$", out, re.MULTILINE)
    assert total is not None, out
    ch, qemu = float(total.group(1)), float(total.group(2))
    assert ch * 3 <= qemu
    assert "launcher process (virt-launcher | ch-launcher)" in out and "video RAM" in out


def test_overhead_reads_owners_templates(tmp_path):
    path = tmp_path / "vm.yaml"
    path.write_text(yaml.safe_dump(b.vm(b.vmi())))
    code, out = run(["overhead", "--kubevirt", "v1.9.0", str(path)])
    assert code == 0 and "VirtualMachine testvm" in out and "KubeVirt v1.9.0" in out


def test_overhead_reports_a_vmi_with_a_bad_quantity(tmp_path):
    path = tmp_path / "bad.yaml"
    obj = b.vmi()
    obj["spec"]["domain"]["resources"]["requests"]["memory"] = "lots"
    path.write_text(yaml.safe_dump(obj))
    code, out = run(["overhead", str(path)])
    assert code == 1 and "error:" in out


@pytest.mark.parametrize("command", ["check", "overhead"])
@pytest.mark.parametrize("text, error", [
    ("", "no objects passed to {command} (as kubectl says of an empty file)"),
    ("# only a comment\n---\n", "no objects passed to {command} (as kubectl says of an empty file)"),
    ("- apiVersion: kubevirt.io/v1\n  kind: VirtualMachineInstance\n",
     ("{path}#0: a YAML list is not a Kubernetes object; write one object per document (separated by ---) or a "
      "List with items")),
    ("just a string\n", "{path}#0: str 'just a string' is not a Kubernetes object"),
    ("apiVersion: v1\nkind: 5\n", "{path}#0: not a Kubernetes object: kind not set"),
    ("kind: VirtualMachineInstance\n", "{path}#0: not a Kubernetes object: apiVersion not set"),
    ("apiVersion: v1\nkind: List\nitems: 3\n", "{path}#0: a List whose items is not a list"),
    ("apiVersion: v1\nkind: List\nitems: [[1]]\n",
     ("{path}#0.items[0]: a YAML list is not a Kubernetes object; write one object per document (separated by ---) "
      "or a List with items")),
])
def test_what_kubectl_apply_refuses_is_exit_2_naming_the_document(tmp_path, capsys, command, text, error):
    """As `kubectl apply -f` (`error: no objects passed to apply`, `invalid object to validate`),
    but with the exit status 2 of unusable input; an object it would take is checked as before."""
    path = tmp_path / "odd.yaml"
    path.write_text(text + "---\n" + yaml.safe_dump(b.vmi(annotations=b.CH)) if "#0" in error else text)
    assert main([command, str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == "error: " + error.format(command=command, path=path) + "\n"


def test_objects_of_other_kinds_are_passed_over(tmp_path):
    path = tmp_path / "mixed.yaml"
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n"
                    + yaml.safe_dump(b.vmi(annotations=b.CH)))
    code, out = run(["check", str(path)])
    assert code == 0 and out.splitlines()[0] == f"{path}#1: VirtualMachineInstance testvmi: allowed"
    assert out.splitlines()[-1] == "1 checked, 0 denied"


def _with_disks(kind_of_second: dict) -> dict:
    vmi = b.vmi(annotations=b.CH)
    vmi["spec"]["domain"]["devices"]["disks"] = [{"name": "root", "disk": {"bus": "virtio"}},
                                                 {"name": "data", **kind_of_second}]
    vmi["spec"]["volumes"] = [{"name": "root", "containerDisk": {"image": "example.org/root:1"}},
                              {"name": "data", "containerDisk": {"image": "example.org/data:1"}}]
    return vmi


SATA = ("  warning: spec.domain.devices.disks[1].disk.bus 'sata' (KubeVirt's default for a disk without a bus) is "
        "attached as virtio-blk (no SATA in Cloud Hypervisor): the guest sees /dev/vdX")


@pytest.mark.parametrize("second", [{"disk": {}}, {}], ids=["disk without bus", "no device type"])
def test_check_judges_a_vmi_as_the_webhook_sees_it_after_kubevirts_defaults(tmp_path, second):
    """virt-api makes a disk without a bus (or without a device type) `bus: sata` on amd64 before
    the webhook sees the VMI (through the real API server: tests/apiserver/test_check_matches_server.py)."""
    path = tmp_path / "vmi.yaml"
    path.write_text(yaml.safe_dump(_with_disks(second)))
    code, out = run(["check", str(path)])
    assert code == 0 and SATA in out.splitlines()
    assert "disks[0]" not in out  # a bus that is written stays as written


def test_check_judges_templates_as_written(tmp_path):
    vm = b.vm(_with_disks({"disk": {}}))  # virt-api does not default a VM's template
    path = tmp_path / "objs.yaml"
    path.write_text(yaml.safe_dump(vm))
    code, out = run(["check", str(path)])
    assert code == 0 and "sata" not in out, out


def test_check_gives_a_volume_without_a_disk_the_disk_virt_api_adds(tmp_path):
    vmi = _with_disks({"disk": {"bus": "virtio"}})
    vmi["spec"]["volumes"].append({"name": "extra", "containerDisk": {"image": "example.org/extra:1"}})
    path = tmp_path / "vmi.yaml"
    path.write_text(yaml.safe_dump(vmi))
    code, out = run(["check", str(path)])
    assert code == 0 and "  warning: spec.domain.devices.disks[2].disk.bus 'sata' (KubeVirt's default" in out


def test_overhead_counts_the_disk_virt_api_adds_for_a_volume_without_one(tmp_path):
    written = _with_disks({"disk": {"bus": "virtio"}})
    implied = copy.deepcopy(written)
    del implied["spec"]["domain"]["devices"]["disks"][1]  # its volume stays: virt-api adds the disk
    tables = []
    for obj in (written, implied):
        path = tmp_path / "vmi.yaml"
        path.write_text(yaml.safe_dump(obj))
        code, out = run(["overhead", str(path)])
        assert code == 0
        tables.append(out.split("\n", 1)[1])
    assert tables[0] == tables[1]


# KubeVirt's examples the webhook denied before the process model of docs/process-model.md
# (VFIO devices, dedicated CPUs): now admitted, each with exactly the warnings it deserves.
ADMITTED_SINCE_THE_PROCESS_MODEL = {
    "vmi-gpu": [],
    "vmi-sriov": [],
    "vmi-fedora-isolated": [],
    "vmi-usb": [("spec.domain.devices.hostDevices[0]: kubevirt.io/storage must be a PCI or mediated device: "
                 "a USB one fails the start (Cloud Hypervisor has no USB)")],
}
NO_DISPLAY = ("spec.domain.devices.autoattachGraphicsDevice: no display (VNC) on Cloud Hypervisor; use the serial "
              "console")


@pytest.mark.parametrize("name", sorted(ADMITTED_SINCE_THE_PROCESS_MODEL))
def test_the_vfio_and_dedicated_cpu_examples_are_admitted_with_the_warnings_they_deserve(name):
    path = require_shared(KUBEVIRT_EXAMPLES / f"{name}.yaml")
    code, out = run(["check", "--all", str(path)])
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].endswith(": allowed"), out
    assert [line.removeprefix("  warning: ") for line in lines[1:-1]] == [*ADMITTED_SINCE_THE_PROCESS_MODEL[name],
                                                                         NO_DISPLAY]
    assert lines[-1] == "1 checked, 0 denied"


def test_check_closes_each_file_it_reads(tmp_path):
    import gc
    import warnings

    path = tmp_path / "vmi.yaml"
    path.write_text(yaml.safe_dump(b.vmi(annotations=b.CH)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, _ = run(["check", str(path)])
        gc.collect()
    assert code == 0
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)], "a file was left open"


# --- check --kubevirt-cr: which host devices are USB, as the cluster says ---------------------

# What `kubectl get kubevirt -n kubevirt kubevirt -o yaml` prints of a cluster that permits
# KubeVirt's example USB device (vmi-usb's kubevirt.io/storage, QEMU's usb-storage 46f4:0001) and
# a GPU; its status names a KubeVirt release the add-on does not support: offline, nothing is gated.
KUBEVIRT_CR = {
    "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
    "metadata": {"name": "kubevirt", "namespace": "kubevirt", "resourceVersion": "4242"},
    "spec": {"configuration": {
        "developerConfiguration": {"featureGates": ["HostDevices"]},
        "permittedHostDevices": {
            "pciHostDevices": [{"pciVendorSelector": "10DE:1EB8", "resourceName": "nvidia.com/TU104GL_Tesla_T4"}],
            "usb": [{"resourceName": "kubevirt.io/storage", "selectors": [{"vendor": "46f4", "product": "0001"}]}]}}},
    "status": {"observedKubeVirtVersion": "v1.7.0", "phase": "Deployed"},
}
USB_CAUSE = ("  spec.domain.devices.hostDevices[0].deviceName: FieldValueNotSupported: "
             "spec.domain.devices.hostDevices[0].deviceName 'kubevirt.io/storage' is not supported: it is a USB "
             "device (permittedHostDevices.usb of the KubeVirt CR) and Cloud Hypervisor has no USB controller")


@pytest.mark.parametrize("as_list", [False, True], ids=["kubectl get kubevirt NAME", "kubectl get kubevirt -A"])
def test_check_with_the_kubevirt_cr_refuses_the_usb_example_as_the_webhook_does(tmp_path, as_list):
    vmi_usb = require_shared(KUBEVIRT_EXAMPLES / "vmi-usb.yaml")
    cr = tmp_path / "kubevirt.yaml"
    cr.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [KUBEVIRT_CR]} if as_list
                                 else KUBEVIRT_CR))
    code, out = run(["check", "--all", "--kubevirt-cr", str(cr), str(vmi_usb)])
    assert code == 1
    assert out.splitlines() == [f"{vmi_usb}#0: VirtualMachineInstance vmi-usb: DENIED", USB_CAUSE,
                                f"  warning: {NO_DISPLAY}", "1 checked, 1 denied"]


def test_check_with_the_kubevirt_cr_passes_a_gpu_it_permits_as_pci_without_a_word(tmp_path):
    vmi = b.vmi(annotations=b.CH)
    vmi["spec"]["domain"]["devices"].update(autoattachGraphicsDevice=False, hostDevices=[
        {"name": "t4", "deviceName": "nvidia.com/TU104GL_Tesla_T4"}])
    path, cr = tmp_path / "vmi.yaml", tmp_path / "kubevirt.yaml"
    path.write_text(yaml.safe_dump(vmi))
    cr.write_text(yaml.safe_dump(KUBEVIRT_CR))
    assert run(["check", "--kubevirt-cr", str(cr), str(path)]) == (
        0, f"{path}#0: VirtualMachineInstance testvmi: allowed\n1 checked, 0 denied\n")
    code, out = run(["check", str(path)])  # without it: the warning
    assert code == 0 and ("  warning: spec.domain.devices.hostDevices[0]: nvidia.com/TU104GL_Tesla_T4 must be a "
                          "PCI or mediated device: a USB one fails the start (Cloud Hypervisor has no USB)") in out


@pytest.mark.parametrize(("text", "found"), [
    ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", "none"),
    (yaml.safe_dump_all([KUBEVIRT_CR, KUBEVIRT_CR]), "{path}#0, {path}#1"),
])
def test_a_kubevirt_cr_file_without_exactly_one_kubevirt_is_exit_2_before_anything_is_printed(tmp_path, capsys,
                                                                                                text, found):
    cr, path = tmp_path / "kubevirt.yaml", tmp_path / "vmi.yaml"
    cr.write_text(text)
    path.write_text(yaml.safe_dump(b.vmi(annotations=b.CH)))
    assert main(["check", "--kubevirt-cr", str(cr), str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"error: {cr}: --kubevirt-cr takes a file with the cluster's one KubeVirt object, "
                            f"found {found.format(path=cr)}\n")


def test_the_installed_ch_admission_command_takes_the_kubevirt_cr(tmp_path):
    """The console script as users run it: `kubectl get kubevirt ... -o yaml > kubevirt.yaml`, then check."""
    vmi = b.vmi(annotations=b.CH)
    vmi["spec"]["domain"]["devices"]["hostDevices"] = [{"name": "stick", "deviceName": "kubevirt.io/storage"}]
    path, cr = tmp_path / "vmi.yaml", tmp_path / "kubevirt.yaml"
    path.write_text(yaml.safe_dump(vmi))
    cr.write_text(yaml.safe_dump(KUBEVIRT_CR))
    command = pathlib.Path(sys.executable).parent / "ch-admission"
    proc = subprocess.run([str(command), "check", "--kubevirt-cr", str(cr), str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines()[:2] == [f"{path}#0: VirtualMachineInstance testvmi: DENIED", USB_CAUSE]
    proc = subprocess.run([str(command), "check", "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert "--kubevirt-cr FILE" in proc.stdout


# --- migrations, judged against the VMI among the files (admission/migrations.py) -------------------


def test_check_judges_a_migration_against_its_vmi_in_the_files(tmp_path):
    stuck, movable = b.vmi(name="stuck", annotations=b.CH), b.vmi(name="movable", annotations=b.CH, volumes=[])
    movable["spec"]["domain"]["devices"] = {"disks": [], "autoattachPodInterface": False}
    path = tmp_path / "vmis.yaml"
    path.write_text(yaml.safe_dump_all([stuck, movable, b.vmi(name="plain")]))
    vmims = tmp_path / "vmims.yaml"
    vmims.write_text(yaml.safe_dump_all([b.vmim("stuck", name="m1"), b.vmim("movable", name="m2"),
                                         b.vmim("plain", name="m3"), b.vmim("elsewhere", name="m4")]))
    code, out = run(["check", str(path), str(vmims)])
    assert code == 1
    lines = out.splitlines()
    assert lines[lines.index(f"{vmims}#0: VirtualMachineInstanceMigration m1: DENIED") + 1] == (
        "  Cannot migrate VMI, Reason: DisksNotLiveMigratable, Message: volume 'containerdisk' (containerDisk) is "
        "local to the pod and writable: Cloud Hypervisor cannot copy disks during a migration")
    assert f"{vmims}#1: VirtualMachineInstanceMigration m2: allowed" in lines
    assert (f"{vmims}#2: VirtualMachineInstanceMigration m3: its VMI plain is not selected for Cloud Hypervisor "
            "(kubevirt-ch.io/hypervisor: cloud-hypervisor); skipped") in lines
    assert (f"{vmims}#3: VirtualMachineInstanceMigration m4: its VMI default/elsewhere is not among the files (the "
            "webhook reads it from the cluster); skipped") in lines
    assert lines[-1] == "4 checked, 1 denied"  # both annotated VMIs run (allowed); two migrations judged
    code, out = run(["check", "--all", str(path), str(vmims)])
    assert f"{vmims}#2: VirtualMachineInstanceMigration m3: DENIED" in out.splitlines(), "--all selects its VMI too"


def test_check_with_the_kubevirt_cr_applies_its_migrating_eviction_default_as_virt_api_does(tmp_path):
    cr = copy.deepcopy(KUBEVIRT_CR)
    cr["spec"]["configuration"]["evictionStrategy"] = "LiveMigrate"
    path, crf = tmp_path / "objs.yaml", tmp_path / "kubevirt.yaml"
    path.write_text(yaml.safe_dump_all([b.vmi(annotations=b.CH), b.vm(b.vmi(annotations=b.CH))]))
    crf.write_text(yaml.safe_dump(cr))
    code, out = run(["check", "--kubevirt-cr", str(crf), str(path)])
    assert code == 1
    lines = out.splitlines()
    assert lines[:2] == [f"{path}#0: VirtualMachineInstance testvmi: DENIED",
                         ("  spec.evictionStrategy: FieldValueNotSupported: spec.evictionStrategy is not supported: "
                          "LiveMigrate (the cluster's default, the KubeVirt CR's configuration.evictionStrategy, "
                          "which virt-api sets in every VMI without its own): Cloud Hypervisor cannot live-migrate "
                          "this VMI (DisksNotLiveMigratable: volume 'containerdisk' (containerDisk) is local to the "
                          "pod and writable: Cloud Hypervisor cannot copy disks during a migration), so a node drain "
                          "would block on migrations that fail; use None or External, or make the VMI migratable")]
    assert f"{path}#1: VirtualMachine testvm: allowed" in lines
    assert any(x.startswith("  warning: spec.template.spec.evictionStrategy is not set, so virt-api will set the "
                            "cluster's default LiveMigrate") for x in lines), out
    assert run(["check", str(path)])[0] == 0, "without the CR nothing is known"

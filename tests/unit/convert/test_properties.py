"""Property tests: random and mutated VMI specs give a Plan or UnsupportedFeature(s), never another
exception; and every Plan given satisfies the rules Cloud Hypervisor checks at boot."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ch_launcher.convert import LauncherEnv, PodFacts, UnsupportedFeature, Verdict, check, translate
from tests.unit.convert.examples_support import EXAMPLES

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ENVS = [LauncherEnv(), LauncherEnv(pod=PodFacts(cpuset=(0, 1, 2, 3), link_mtu={"eth0": 1500, "tap0": 1500},
                                                link_mac={"eth0": "0a:58:0a:00:00:07"}))]

names = st.sampled_from(["root", "data", "ci", "cm", "v4", "_x", "a" * 70])
quantities = st.one_of(st.sampled_from(["1Gi", "128Mi", "1024M", "2", "500m", "0", "-1Gi", "1.5Gi", "3Mi", "2Mi",
                                        "1e3", "lots", "", "1000001"]),
                       st.integers(min_value=-2, max_value=2**41), st.floats(allow_nan=True),
                       st.sampled_from([float("inf"), float("-inf"), 1e300, 2**64, "9Ei", "1e400"]))
small_ints = st.one_of(st.integers(min_value=-3, max_value=300), st.sampled_from([2**31, 2**63, 10**30]))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**63, max_value=2**63), st.text(max_size=8),
                      st.floats(allow_nan=False))
json_any = st.recursive(json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                        max_leaves=8)


def optional(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.none(), strategy)


cpu = st.fixed_dictionaries({}, optional={
    "sockets": small_ints, "cores": small_ints, "threads": small_ints, "maxSockets": small_ints,
    "model": st.sampled_from(["", "host-passthrough", "host-model", "Skylake", "x"]),
    "features": st.lists(st.fixed_dictionaries({"name": st.text(max_size=5)},
                                               optional={"policy": st.text(max_size=5)}), max_size=3),
    "dedicatedCpuPlacement": st.booleans(), "isolateEmulatorThread": st.booleans(),
    "realtime": st.just({}), "numa": st.just({"guestMappingPassthrough": {}}),
})
memory = st.fixed_dictionaries({}, optional={
    "guest": quantities, "maxGuest": quantities, "hugepages": st.fixed_dictionaries({"pageSize": quantities}),
    "reservedOverhead": st.fixed_dictionaries({}, optional={"memLock": st.sampled_from(["Required", "NotRequired"])}),
})
resources = st.fixed_dictionaries({}, optional={
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2),
    "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), quantities, max_size=2),
})
firmware = st.fixed_dictionaries({}, optional={
    "uuid": st.sampled_from(["", "5d307ca9-b3ef-428c-8861-06e72d69f223", "nope"]), "serial": st.text(max_size=10),
    "bootloader": st.fixed_dictionaries({}, optional={
        "bios": st.fixed_dictionaries({}, optional={"useSerial": st.booleans()}),
        "efi": st.fixed_dictionaries({}, optional={"secureBoot": st.booleans(), "persistent": st.booleans()})}),
    "kernelBoot": st.fixed_dictionaries({}, optional={
        "kernelArgs": st.text(max_size=10),
        "container": st.fixed_dictionaries({"image": st.just("k")}, optional={
            "kernelPath": st.sampled_from(["", "/boot/vmlinuz", "/", "x/"]),
            "initrdPath": st.sampled_from(["", "/boot/initrd"])})}),
    "acpi": st.fixed_dictionaries({}, optional={"slicNameRef": names}),
})
feature_state = st.fixed_dictionaries({}, optional={"enabled": st.booleans()})
features = st.fixed_dictionaries({}, optional={
    "acpi": feature_state, "apic": feature_state, "smm": feature_state, "pvspinlock": feature_state,
    "kvm": st.fixed_dictionaries({}, optional={"hidden": st.booleans()}), "hypervPassthrough": feature_state,
    "hyperv": st.dictionaries(st.sampled_from(["relaxed", "vapic", "vendorid", "synictimer", "evmcs"]),
                              st.one_of(feature_state, json_any), max_size=3),
})
clock = st.fixed_dictionaries({}, optional={
    "timezone": st.text(max_size=5), "utc": st.fixed_dictionaries({}, optional={"offsetSeconds": small_ints}),
    "timer": st.dictionaries(st.sampled_from(["hpet", "pit", "rtc", "kvm", "hyperv", "other"]),
                             st.one_of(st.fixed_dictionaries({}, optional={"present": st.booleans(),
                                                                           "tickPolicy": st.text(max_size=5)}),
                                       json_any), max_size=4),
})
disk = st.fixed_dictionaries({"name": names}, optional={
    "disk": st.fixed_dictionaries({}, optional={"bus": st.sampled_from(["", "virtio", "sata", "scsi"]),
                                                "readonly": st.booleans(), "pciAddress": st.just("0000:00:05.0")}),
    "cdrom": st.just({}), "lun": st.just({}), "bootOrder": small_ints, "serial": st.text(max_size=24),
    "cache": st.sampled_from(["", "none", "writethrough", "writeback", "bad"]), "shareable": st.booleans(),
    "errorPolicy": st.sampled_from(["", "stop", "report"]), "blockSize": st.one_of(json_any, st.just({"custom": {}})),
    "tag": st.text(max_size=3),
})
cloud_init = st.fixed_dictionaries({}, optional={
    "userData": st.text(max_size=20), "userDataBase64": st.sampled_from(["aGk=", "@@", ""]),
    "networkData": st.text(max_size=10), "secretRef": st.just({"name": "s"}),
    "networkDataSecretRef": st.just({"name": "s"}),
})
source = st.one_of(
    st.fixed_dictionaries({"containerDisk": st.fixed_dictionaries({"image": st.just("img")})}),
    st.fixed_dictionaries({"persistentVolumeClaim": st.fixed_dictionaries(
        {"claimName": st.just("c")}, optional={"readOnly": st.booleans(), "hotpluggable": st.booleans()})}),
    st.fixed_dictionaries({"dataVolume": st.fixed_dictionaries({"name": st.just("dv")})}),
    st.fixed_dictionaries({"ephemeral": st.just({"persistentVolumeClaim": {"claimName": "c"}})}),
    st.fixed_dictionaries({"emptyDisk": st.fixed_dictionaries({"capacity": quantities})}),
    st.fixed_dictionaries({"hostDisk": st.fixed_dictionaries(
        {"path": st.sampled_from(["/d/disk.img", "/", ""]), "type": st.sampled_from(["Disk", "DiskOrCreate", "X"])},
        optional={"capacity": quantities})}),
    st.fixed_dictionaries({"cloudInitNoCloud": cloud_init}),
    st.fixed_dictionaries({"cloudInitConfigDrive": cloud_init}),
    st.fixed_dictionaries({"configMap": st.fixed_dictionaries({"name": st.just("cm")},
                                                              optional={"volumeLabel": st.text(max_size=40)})}),
    st.fixed_dictionaries({"secret": st.just({"secretName": "s"})}),
    st.fixed_dictionaries({"serviceAccount": st.just({"serviceAccountName": "sa"})}),
    st.fixed_dictionaries({"downwardAPI": st.just({"fields": []})}),
    st.fixed_dictionaries({"sysprep": st.just({})}),
    st.just({}),
)
volume = st.builds(lambda name, src: {"name": name, **src}, names, source)
credential = st.one_of(
    json_any.filter(lambda v: isinstance(v, dict)),
    st.fixed_dictionaries({"sshPublicKey": st.fixed_dictionaries({}, optional={
        "source": st.one_of(st.just({"secret": {"secretName": "k"}}), json_any),
        "propagationMethod": st.one_of(st.sampled_from([{"noCloud": {}}, {"configDrive": {}},
                                                        {"qemuGuestAgent": {}}, {}]), json_any)})}),
)
volume_status = st.fixed_dictionaries({"name": names}, optional={"persistentVolumeClaimInfo": st.fixed_dictionaries(
    {}, optional={"volumeMode": st.sampled_from(["Block", "Filesystem", ""]),
                  "capacity": st.dictionaries(st.just("storage"), quantities, max_size=1),
                  "requests": st.dictionaries(st.just("storage"), quantities, max_size=1)})})

vmis = st.builds(
    lambda d, vols, creds, status, extra: {
        "metadata": {"name": "vm", "namespace": "ns", "uid": "u", "annotations": extra.pop("annotations", {})},
        "spec": {"domain": d, "volumes": vols, "accessCredentials": creds, **extra},
        "status": {"volumeStatus": status}},
    st.fixed_dictionaries({}, optional={
        "cpu": cpu, "memory": memory, "resources": resources, "firmware": firmware, "features": features,
        "clock": clock, "machine": st.fixed_dictionaries({"type": st.text(max_size=6)}),
        "chassis": st.dictionaries(st.sampled_from(["asset", "serial", "sku"]), json_any, max_size=2),
        "ioThreadsPolicy": st.sampled_from(["", "auto", "shared", "supplementalPool", "x"]),
        "launchSecurity": st.sampled_from([{}, {"sev": {}}, {"tdx": {}}]),
        "devices": st.fixed_dictionaries({}, optional={
            "disks": st.lists(disk, max_size=5), "blockMultiQueue": st.booleans(),
            "autoattachSerialConsole": st.booleans(), "autoattachMemBalloon": st.booleans(),
            "autoattachPodInterface": st.booleans(),
            "filesystems": st.lists(st.fixed_dictionaries({"name": names, "virtiofs": st.just({})}), max_size=1)}),
    }),
    st.lists(volume, max_size=5),
    st.lists(credential, max_size=2),
    st.lists(volume_status, max_size=3),
    st.fixed_dictionaries({}, optional={
        "architecture": st.sampled_from(["", "amd64", "arm64"]), "hostname": st.text(max_size=8),
        "annotations": st.dictionaries(st.sampled_from(["kubevirt.io/instancetype-name",
                                                        "kubevirt.io/free-page-reporting-disabled"]),
                                       st.text(max_size=5), max_size=2)}),
)


def assert_sound(verdict: Verdict) -> None:
    """Problems are well-formed; an accepted VMI's config obeys Cloud Hypervisor's boot-time rules."""
    for p in verdict.problems:
        assert isinstance(p, UnsupportedFeature) and isinstance(p.field, str) and p.message
    if verdict.plan is None:
        assert verdict.problems
        return
    config = verdict.plan.config
    data = config.to_api()
    assert data["payload"] and (("firmware" in data["payload"]) != ("kernel" in data["payload"]))
    cpus = config.cpus
    assert cpus is not None and 1 <= cpus.boot_vcpus <= cpus.max_vcpus
    if cpus.topology is not None:
        t = cpus.topology
        assert t.threads_per_core * t.cores_per_die * t.dies_per_package * t.packages == cpus.max_vcpus
        assert t.threads_per_core <= 2
    assert config.memory is not None and config.memory.size > 0
    if config.memory.hugepage_size:
        assert config.memory.size % config.memory.hugepage_size == 0
    if config.memory.hotplug_size:
        assert config.memory.hotplug_size % (128 << 20) == 0
    ids = [d.id for d in config.disks or []]
    assert len(ids) == len(set(ids)) and all(i and not i.startswith("_") for i in ids)
    for d in config.disks or []:
        assert d.path and d.image_type in ("Raw", "Qcow2")
        assert d.serial is None or len(d.serial.encode()) <= 20
        assert d.num_queues is None or d.num_queues <= cpus.boot_vcpus
    made = {getattr(step, "path", None) for step in verdict.plan.steps}
    for d in config.disks or []:
        assert d.path in made, f"no step prepares or requires {d.path}"
    for path in (config.payload.firmware, config.payload.kernel, config.payload.initramfs):  # type: ignore[union-attr]
        assert path is None or path in made, f"no step requires {path}"
    assert config.console is not None and config.console.mode == "Off"
    assert config.serial is not None and config.serial.mode in ("Off", "Socket")


@SETTINGS
@given(body=vmis, env=st.sampled_from(ENVS))
def test_random_vmis_give_a_plan_or_unsupported_features_never_another_exception(body: dict[str, Any],
                                                                                 env: LauncherEnv) -> None:
    assert_sound(check(body, env))
    with contextlib.suppress(UnsupportedFeature):
        translate(body, env)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into a JSON document."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


@st.composite
def mutated_examples(draw: st.DrawFn) -> dict[str, Any]:
    """A KubeVirt example with a few random edits: a value replaced, a key removed or added."""
    _, base = draw(st.sampled_from(EXAMPLES))
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        targets = [p for p in paths(doc) if p]
        if not targets:
            break
        path = draw(st.sampled_from(targets))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(json_any)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = draw(json_any)
        else:
            parent.append(draw(json_any))
    return doc


@pytest.mark.skipif(not EXAMPLES, reason="../shared/reference/data/kubevirt-examples is absent")
@SETTINGS
@given(body=mutated_examples() if EXAMPLES else st.just({}), env=st.sampled_from(ENVS))
def test_mutated_kubevirt_examples_give_a_plan_or_unsupported_features(body: dict[str, Any], env: LauncherEnv) -> None:
    assert_sound(check(body, env))


@SETTINGS
@given(payload=json_any)
def test_any_json_at_all_is_a_verdict_not_a_crash(payload: Any) -> None:
    verdict = check(payload if isinstance(payload, (dict, str)) else {"spec": payload})
    assert_sound(verdict)


@st.composite
def supported_vmis(draw: st.DrawFn) -> dict[str, Any]:
    """A VMI built only from settings the backend supports."""
    cores, sockets, threads = (draw(st.integers(1, 4)) for _ in range(3))
    threads = min(threads, 2)
    max_sockets = draw(st.sampled_from([0, sockets, sockets * 2]))
    hugepages = draw(st.booleans())
    guest_mib = draw(st.integers(1, 64)) * (2 if hugepages else 1) * 64
    mem: dict[str, Any] = {"guest": f"{guest_mib}Mi"}
    if hugepages:
        mem["hugepages"] = {"pageSize": "2Mi"}
    if draw(st.booleans()):
        mem["maxGuest"] = f"{guest_mib + draw(st.integers(0, 2048))}Mi"
    kinds = draw(st.lists(st.sampled_from(["containerDisk", "pvc", "block", "emptyDisk", "hostDisk", "configMap",
                                           "secret", "serviceAccount", "downwardAPI", "ephemeral"]),
                          max_size=6))
    volumes: list[dict[str, Any]] = []
    status: list[dict[str, Any]] = []
    disks: list[dict[str, Any]] = []
    order = draw(st.permutations(list(range(1, len(kinds) + 2))))
    for i, kind in enumerate(kinds):
        name = f"v{i}"
        if kind == "containerDisk":
            volumes.append({"name": name, "containerDisk": {"image": "img"}})
        elif kind in ("pvc", "block"):
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": name}})
            status.append({"name": name, "persistentVolumeClaimInfo": {
                "volumeMode": "Block" if kind == "block" else "Filesystem", "capacity": {"storage": "10Gi"}}})
        elif kind == "ephemeral":
            volumes.append({"name": name, "ephemeral": {"persistentVolumeClaim": {"claimName": name}}})
        elif kind == "emptyDisk":
            volumes.append({"name": name, "emptyDisk": {"capacity": f"{draw(st.integers(1, 100))}Gi"}})
        elif kind == "hostDisk":
            volumes.append({"name": name, "hostDisk": {"path": f"/data/{name}.img", "type": "DiskOrCreate",
                                                      "capacity": "1Gi"}})
        elif kind == "serviceAccount":
            volumes.append({"name": name, "serviceAccount": {"serviceAccountName": "default"}})
        else:
            volumes.append({"name": name, kind: {}})
        if draw(st.booleans()):  # else KubeVirt's defaulting adds the disk
            d: dict[str, Any] = {"name": name, "disk": {"bus": draw(st.sampled_from(["", "virtio"]))}}
            if draw(st.booleans()):
                d["bootOrder"] = order[i]
            if draw(st.booleans()):
                d["serial"] = draw(st.text(alphabet="abcdef0123456789-", min_size=1, max_size=20))
            d["cache"] = draw(st.sampled_from(["", "none", "writeback"]))
            disks.append(d)
    if draw(st.booleans()):
        volumes.append({"name": "ci", "cloudInitNoCloud": {"userData": draw(st.text(min_size=1, max_size=40))}})
    bootloader = draw(st.sampled_from([None, {"bios": {}}, {"efi": {"secureBoot": False}}]))
    domain: dict[str, Any] = {
        "cpu": {"cores": cores, "sockets": sockets, "threads": threads, "maxSockets": max_sockets,
                "model": draw(st.sampled_from(["host-model", "host-passthrough"]))},
        "memory": mem,
        "devices": {"disks": disks, "blockMultiQueue": draw(st.booleans()), "autoattachPodInterface": False,
                    "autoattachMemBalloon": draw(st.booleans()), "autoattachSerialConsole": draw(st.booleans())},
        "firmware": {"uuid": "5d307ca9-b3ef-428c-8861-06e72d69f223",
                     **({"bootloader": bootloader} if bootloader else {})},
        "features": {"acpi": {}, "apic": {}},
        "machine": {"type": "q35"},
    }
    return {"metadata": {"name": "vm", "namespace": "ns", "uid": "u"},
            "spec": {"domain": domain, "volumes": volumes}, "status": {"volumeStatus": status}}


@SETTINGS
@given(body=supported_vmis(), env=st.sampled_from(ENVS))
def test_vmis_made_of_supported_settings_are_accepted_and_obey_cloud_hypervisors_rules(body: dict[str, Any],
                                                                                        env: LauncherEnv) -> None:
    verdict = check(body, env)
    assert verdict.allowed, verdict.problems
    assert_sound(verdict)
    assert verdict.plan is not None
    assert len(verdict.plan.config.disks or []) == len(body["spec"]["volumes"])

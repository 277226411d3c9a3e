"""CPU and memory hotplug stories: virt-handler's `SyncVirtualMachineCPUs` / `SyncVirtualMachineMemory`
against a real launcher on the simulated VMM.

KubeVirt (@d923fdb815cd) sends them on the migration target after a live migration that a
changed `spec.domain.cpu.sockets` or `spec.domain.memory.guest` started
(`pkg/virt-handler/migration-target.go` finalizeMigration); the VMI carries the new values, and
virt-handler reads the guest's memory back from the Domain's `CurrentMemory`.
"""

from __future__ import annotations

import copy

import pytest

from tests.functional.harness import Harness, make_vmi

MiB = 1 << 20


def hotpluggable_vmi() -> dict:
    vmi = make_vmi()
    vmi["spec"]["domain"]["cpu"] = {"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 4}
    vmi["spec"]["domain"]["memory"] = {"guest": "128Mi", "maxGuest": "512Mi"}
    return vmi


@pytest.fixture
def new_harness():
    made = []

    def new(**kwargs):
        made.append(Harness(**kwargs))
        return made[-1]

    yield new
    for h in made:
        h.close()


def enabled_vcpus(domain: dict) -> int:
    """libvirt's live `<vcpu current='n'>max</vcpu>` reads as VCPU.CPUs = max in api.Domain (it has
    no `current`); the enabled vCPUs are those of the `<vcpus>` list marked enabled."""
    return sum(v["Enabled"] == "yes" for v in domain["Spec"]["VCPUs"]["VCPU"])


def memory_of(domain: dict) -> tuple[int, int]:
    spec = domain["Spec"]
    return spec["Memory"]["Value"], spec["CurrentMemory"]["Value"]


def test_sockets_added_and_removed_within_max_sockets_resize_the_vm(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi())

    async def story():
        await vh.boot()
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["cpu"]["sockets"] = 3
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        assert [r["body"] for r in vh.requests("vm.resize")] == [{"desired_vcpus": 3}]
        event = await vh.recorder.wait_for(lambda e: enabled_vcpus(e.domain) == 3, since=since)
        assert event.domain["Spec"]["CPU"]["Topology"] == {"Sockets": 4, "Cores": 1, "Threads": 1}
        assert event.domain["Spec"]["VCPU"]["CPUs"] == 4
        stats = await vh.client.get_domain_stats()
        assert len(stats["Vcpu"]) == 3

        vmi["spec"]["domain"]["cpu"]["sockets"] = 2  # unplug: the guest offlines one
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        assert enabled_vcpus(await vh.client.get_domain()) == 2

        vmi["spec"]["domain"]["cpu"]["sockets"] = 5
        reply = await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi, check=False)
        assert not reply.success and "maxSockets" in reply.message
        assert enabled_vcpus(await vh.client.get_domain()) == 2

    vh.run(story())


def test_memory_grows_within_max_guest_and_the_domain_follows_the_guests_driver(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi())

    async def story():
        await vh.boot()
        assert memory_of(await vh.client.get_domain()) == (128 * MiB, 128 * MiB)
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["memory"]["guest"] = "384Mi"
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SyncVirtualMachineMemory", vmi)
        assert [r["body"] for r in vh.requests("vm.resize")] == [{"desired_ram": 384 * MiB}]
        # the guest's virtio-mem driver plugs it; CurrentMemory (status.memory.guestCurrent) follows
        await vh.recorder.wait_for(lambda e: memory_of(e.domain) == (384 * MiB, 384 * MiB), since=since)
        await vh.client.vmi_command("SyncVirtualMachineMemory", vmi)  # again: nothing to do
        assert len(vh.requests("vm.resize")) == 1

        for guest, text in (("1Gi", "maxGuest"), ("64Mi", "booted with"), ("129Mi", "multiple of 2 MiB")):
            vmi["spec"]["domain"]["memory"]["guest"] = guest
            reply = await vh.client.vmi_command("SyncVirtualMachineMemory", vmi, check=False)
            assert not reply.success and text in reply.message, reply.message
        assert len(vh.requests("vm.resize")) == 1

    vh.run(story())


def test_a_guest_without_a_virtio_mem_driver_keeps_its_current_memory(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi(), env={"FAKE_CH_VIRTIO_MEM_DELAY": "never"})

    async def story():
        await vh.boot()
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["memory"]["guest"] = "256Mi"
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SyncVirtualMachineMemory", vmi)
        event = await vh.recorder.wait_for(lambda e: memory_of(e.domain)[0] == 256 * MiB, since=since)
        assert memory_of(event.domain) == (256 * MiB, 128 * MiB)
        await vh.client.sync(vmi)  # every Sync reads the actual size again
        assert memory_of(await vh.client.get_domain()) == (256 * MiB, 128 * MiB)

    vh.run(story())


def test_a_vm_started_without_max_guest_refuses_memory_hotplug_naming_it(new_harness):
    vh = new_harness()

    async def story():
        await vh.boot()
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["memory"]["guest"] = "256Mi"
        reply = await vh.client.vmi_command("SyncVirtualMachineMemory", vmi, check=False)
        assert not reply.success and "spec.domain.memory.maxGuest" in reply.message
        assert not vh.requests("vm.resize")

    vh.run(story())


def test_resizing_a_vm_that_does_not_run_is_refused(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi())

    async def story():
        await vh.start()
        reply = await vh.client.vmi_command("SyncVirtualMachineCPUs", vh.vmi, check=False)
        assert not reply.success and reply.message

    vh.run(story())

"""CPU and memory hotplug stories: virt-handler's `SyncVirtualMachineCPUs` / `SyncVirtualMachineMemory`
against a real launcher, on the simulated VMM and (`@BOTH_VMMS`) on the real cloud-hypervisor in
the pod sandbox, whose tiny guest acknowledges added vCPUs and ejects removed ones as a Linux
guest's ACPI does (it has no virtio-mem driver, so it never plugs hot-added memory).

KubeVirt (@d923fdb815cd) sends them on the migration target after a live migration that a
changed `spec.domain.cpu.sockets` or `spec.domain.memory.guest` started
(`pkg/virt-handler/migration-target.go` finalizeMigration); the VMI carries the new values, and
virt-handler reads the guest's memory back from the Domain's `CurrentMemory`.
"""

from __future__ import annotations

import copy

from tests.builders import with_cpu, with_memory
from tests.functional.harness import make_vmi
from tests.functional.story_fixtures import BOTH_VMMS
from tests.guest.console import CPU_EJECT_IGNORED

MiB = 1 << 20


def hotpluggable_vmi() -> dict:
    return make_vmi(with_cpu(sockets=1, cores=1, threads=1, maxSockets=4), with_memory("128Mi", maxGuest="512Mi"))


def enabled_vcpus(domain: dict) -> int:
    """libvirt's live `<vcpu current='n'>max</vcpu>` reads as VCPU.CPUs = max in api.Domain (it has
    no `current`); the enabled vCPUs are those of the `<vcpus>` list marked enabled."""
    return sum(v["Enabled"] == "yes" for v in domain["Spec"]["VCPUs"]["VCPU"])


def memory_of(domain: dict) -> tuple[int, int]:
    spec = domain["Spec"]
    return spec["Memory"]["Value"], spec["CurrentMemory"]["Value"]


@BOTH_VMMS
def test_sockets_added_and_removed_within_max_sockets_resize_the_vm(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi())

    async def story():
        await vh.boot()
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["cpu"]["sockets"] = 3
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        assert len(vh.requests("vm.resize")) == 1
        if vh.simulated:
            assert [r["body"] for r in vh.requests("vm.resize")] == [{"desired_vcpus": 3}]
        event = await vh.recorder.wait_for(lambda e: enabled_vcpus(e.domain) == 3, since=since)
        assert event.domain["Spec"]["CPU"]["Topology"] == {"Sockets": 4, "Cores": 1, "Threads": 1}
        assert event.domain["Spec"]["VCPU"]["CPUs"] == 4
        stats = await vh.client.get_domain_stats()
        assert len(stats["Vcpu"]) == 3

        vmi["spec"]["domain"]["cpu"]["sockets"] = 2  # unplug: the guest offlines one
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        assert enabled_vcpus(await vh.client.get_domain()) == 2
        vmi["spec"]["domain"]["cpu"]["sockets"] = 1  # and another: the first removal is done (no 429 left)
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        assert enabled_vcpus(await vh.client.get_domain()) == 1
        # at once back to 2: the answer came once vCPU 1 was gone, so this adds one (had it come
        # while the removal was pending, CH would have taken 2 as the count present: nothing to do)
        vmi["spec"]["domain"]["cpu"]["sockets"] = 2
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        assert enabled_vcpus(await vh.client.get_domain()) == 2
        stats = await vh.client.get_domain_stats()
        assert len(stats["Vcpu"]) == 2

        vmi["spec"]["domain"]["cpu"]["sockets"] = 5
        reply = await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi, check=False)
        assert not reply.success and "maxSockets" in reply.message
        assert enabled_vcpus(await vh.client.get_domain()) == 2

    vh.run(story())


@BOTH_VMMS
def test_memory_grows_within_max_guest_and_the_domain_follows_the_guests_driver(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi())

    async def story():
        await vh.boot()
        assert memory_of(await vh.client.get_domain()) == (128 * MiB, 128 * MiB)
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["memory"]["guest"] = "384Mi"
        since = len(vh.recorder.events)
        await vh.client.vmi_command("SyncVirtualMachineMemory", vmi)
        assert len(vh.requests("vm.resize")) == 1
        if vh.simulated:
            assert [r["body"] for r in vh.requests("vm.resize")] == [{"desired_ram": 384 * MiB}]
        # the guest's virtio-mem driver plugs it; CurrentMemory (status.memory.guestCurrent)
        # follows. The tiny guest has none: on the real VMM nothing is plugged, and it stays.
        plugged = 384 * MiB if vh.simulated else 128 * MiB
        await vh.recorder.wait_for(lambda e: memory_of(e.domain) == (384 * MiB, plugged), since=since)
        await vh.client.vmi_command("SyncVirtualMachineMemory", vmi)  # again: nothing to do
        assert len(vh.requests("vm.resize")) == 1

        for guest, text in (("1Gi", "maxGuest"), ("64Mi", "booted with"), ("129Mi", "multiple of 2 MiB")):
            vmi["spec"]["domain"]["memory"]["guest"] = guest
            reply = await vh.client.vmi_command("SyncVirtualMachineMemory", vmi, check=False)
            assert not reply.success and text in reply.message, reply.message
        assert len(vh.requests("vm.resize")) == 1

    vh.run(story())


@BOTH_VMMS
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


@BOTH_VMMS
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


@BOTH_VMMS
def test_resizing_a_vm_that_does_not_run_is_refused(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi())

    async def story():
        await vh.start()
        reply = await vh.client.vmi_command("SyncVirtualMachineCPUs", vh.vmi, check=False)
        assert not reply.success and reply.message

    vh.run(story())


@BOTH_VMMS
def test_a_vcpu_removal_the_guest_never_completes_times_out_and_blocks_further_changes(new_harness):
    vh = new_harness(vmi=hotpluggable_vmi(), ignores_ejects=True)

    async def story():
        await vh.boot()
        vmi = copy.deepcopy(vh.vmi)
        vmi["spec"]["domain"]["cpu"]["sockets"] = 3
        await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi)
        vmi["spec"]["domain"]["cpu"]["sockets"] = 2  # the guest is asked to offline vCPU 2 and never does
        reply = await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi, check=False)
        # as libvirt's vCPU unplug: it waits up to 5 s for the guest, then says so
        assert not reply.success and "vCPU unplug request timed out" in reply.message, reply.message
        await vh.wait_for_ignored_eject(CPU_EJECT_IGNORED)
        assert enabled_vcpus(await vh.client.get_domain()) == 2
        vmi["spec"]["domain"]["cpu"]["sockets"] = 1
        reply = await vh.client.vmi_command("SyncVirtualMachineCPUs", vmi, check=False)
        assert not reply.success and "Too Many Requests" in reply.message, reply.message
        assert enabled_vcpus(await vh.client.get_domain()) == 2  # the Domain says what the VM has
        assert (await vh.client.get_domain())["Status"]["Status"] == "Running"

    vh.run(story())

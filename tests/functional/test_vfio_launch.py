"""A VMI with a GPU through the real launcher, in a launcher pod (uid 107, no capability), on the
simulated and the real VMM, as far as this machine allows: it has no VFIO (no /dev/vfio, no IOMMU),
so the devices are a host tree the launcher's own check reads (`CH_HOST_ROOT`, and the simulated
VMM's `FAKE_CH_HOST_ROOT`) while the real VMM sees the real host.

The stories show the memlock limit the VMM ends up with (before virt-handler's raise of
virtqemud and after), the VFIO device config the VMM is sent, and the error a missing device
gives: the launcher's own, naming the field, before the VMM sees it; and the real VMM's, when
the host lacks VFIO altogether, after which the launcher leaves no VM behind.
"""

from __future__ import annotations

import resource

import pytest

from tests.builders import with_devices, with_memory, with_memory_request
from tests.framework import FAKE_CH, CommandError
from tests.functional import kubevirt_runtime as vh
from tests.functional.harness import Harness, make_vmi
from tests.functional.host_support import BDF, GUEST, RESOURCE, START_SOFT, UNLIMITED, host_tree, soft_memlock, wait_for
from tests.functional.pod_fixtures import real_vmm
from tests.functional.pod_probes import api

ENV = {"PCI_RESOURCE_NVIDIA_COM_GP102GL_TESLA_P40": BDF}


def gpu_vmi() -> dict:
    return make_vmi(with_devices(gpus=[{"name": "gpu1", "deviceName": RESOURCE}]),
                    with_memory(str(GUEST)), with_memory_request(str(GUEST)))


@pytest.fixture
def gpu_pod(pod, vmm_kind):
    """`gpu_pod(bound=True)`: a Harness for a GPU VMI in the pod, on the test's VMM kind."""
    made = []

    def make(*, bound: bool = True) -> Harness:
        tree = host_tree(pod.root / "host", bound=bound)
        pod.own(tree)  # the device plugin's nodes are the pod user's to open
        env = {**ENV, "CH_HOST_ROOT": tree, "FAKE_CH_HOST_ROOT": tree}
        h = Harness(vmi=gpu_vmi(), pod=pod, env=env, real=real_vmm(pod) if vmm_kind == "real" else None)
        made.append(h)
        return h

    yield make
    for h in made:
        h.close()


def test_the_gpu_vmm_gets_the_raised_memlock_limit_and_its_vfio_device_config(gpu_pod):
    h = gpu_pod()

    async def story():
        with soft_memlock(None if UNLIMITED else START_SOFT):
            await h.start()
        owner, monitor = vh.socket_owner(str(h.layout.cmd_socket))
        warm = await wait_for(lambda: _vmm(monitor), what="the VMM started with the launcher")
        before = vh.memlock(warm)
        assert int(before[0]) < GUEST
        vh.adjust_resources(vh.find_virtqemud(owner))  # virt-handler, before the Sync
        if h.ch_binary == str(FAKE_CH):
            await h.client.sync(h.vmi)
            await h.recorder.wait_for_status("Running", timeout=15)
            sent = h.requests("vm.create")[-1]["body"]
        else:
            # this host has no VFIO: the real VMM takes the config, then fails creating the device
            with pytest.raises(CommandError) as e:
                await h.client.sync(h.vmi)
            assert "Cannot create a VFIO device: failed to open /dev/vfio/vfio container" in str(e.value)
            sent = None
        vmm = vh.find_qemu(monitor)
        after = vh.memlock(vmm)
        assert after == (("unlimited", "unlimited") if UNLIMITED else (str(resource.getrlimit(
            resource.RLIMIT_MEMLOCK)[1]),) * 2)
        if sent is not None:
            assert sent["devices"] == [{"path": f"/sys/bus/pci/devices/{BDF}/", "id": "gpu-gpu1"}]
            assert sent["balloon"]["free_page_reporting"] is False
            domain = await h.client.get_domain()
            assert [d["Alias"]["Name"] for d in domain["Spec"]["Devices"]["HostDevices"]] == ["gpu-gpu1"]
        else:  # no half-made VM: the launcher deleted the config the VMM refused to boot
            status, _ = api(h.layout.private_dir / "ch" / "api.sock", "GET", "vm.info")
            assert status != 200
            assert (await h.client.get_domain()) is None

    h.run(story())


def test_a_device_not_bound_to_vfio_fails_the_sync_naming_the_field_before_the_vmm_sees_it(gpu_pod):
    h = gpu_pod(bound=False)

    async def story():
        await h.start()
        vh.adjust_resources(vh.find_virtqemud(vh.socket_owner(str(h.layout.cmd_socket))[0]))
        with pytest.raises(CommandError) as e:
            await h.client.sync(h.vmi)
        assert (f"spec.domain.devices.gpus[0]: GPU gpu1 ({RESOURCE}): /sys/bus/pci/devices/{BDF}/ is bound to "
                "nvidia, not vfio-pci") in str(e.value)
        assert (await h.client.get_domain()) is None

    h.run(story())


def _vmm(monitor: int) -> int | None:
    try:
        return vh.find_qemu(monitor)
    except LookupError:
        return None

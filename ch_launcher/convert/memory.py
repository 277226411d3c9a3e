"""Memory: guest size, hotplug, hugepages, shared memory and the balloon (pure).

Runs after the device configurators, because a device may need guest memory shared
(`Translation.need_shared_memory`).

Guest size. `spec.domain.memory.guest`, else `resources.requests.memory`, else
`resources.limits.memory`, else the hugepage size: KubeVirt's own defaulting order
(`setGuestMemory`, kubevirt `pkg/defaults/defaults.go@d923fdb815cd`).

Hotplug: virtio-mem. `maxGuest` becomes `hotplug_method: VirtioMem` with
`hotplug_size = maxGuest - guest`. KubeVirt itself hot-plugs memory with a virtio-mem device
(libvirt `<memory model='virtio-mem'>`), so guests that work there work here; virtio-mem is
guest-driven, can also give memory back, and needs no ACPI memory-slot dance. ACPI hotplug in
Cloud Hypervisor can only add memory, in DIMM-sized steps that stay forever. Cloud Hypervisor
sizes the virtio-mem region in 128 MiB blocks (`VIRTIO_MEM_ALIGN_SIZE`,
`virtio-devices/src/mem.rs@v53.0`), so the hotplug size is rounded down to that (and to the
hugepage size), with a warning when that loses memory.

Balloon: on unless `autoattachMemBalloon: false`, like KubeVirt (nil means attach). The balloon
never inflates by itself (`size: 0`); it is there for free page reporting, which gives memory the
guest freed back to the node: the density the add-on is for. Free page reporting follows
KubeVirt's rule (`isFreePageReportingEnabled`, `pkg/virt-launcher/virtwrap/manager.go
@d923fdb815cd`): off when the cluster disables it, for high-performance VMIs (dedicated CPUs,
realtime, hugepages) and with the `kubevirt.io/free-page-reporting-disabled: "true"` annotation;
and, unlike KubeVirt's rule but like QEMU's behaviour, off for VMIs with VFIO devices (see `_balloon`).

Hugepages are taken at boot (`prefault`), as libvirt preallocates a hugepage-backed guest's
memory for QEMU (KubeVirt's launcher starts QEMU with `memory-backend-memfd` `hugetlb` and
`prealloc: true`: the node's `HugePages_Free` drops by the guest size at start). Cloud Hypervisor
maps hugepages `MAP_NORESERVE` and would otherwise take each page when the guest first touches it:
a pool emptied meanwhile would kill the VMM with SIGBUS mid-run; with prefault a pool short of
pages fails `vm.boot` ("Failed to prefault memory") before the guest runs.

NUMA passthrough: guest NUMA nodes with hugepage memory zones bound to host nodes (`_numa_zones`).
"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import BalloonConfig, MemoryConfig, MemoryZoneConfig, NumaConfig, NumaDistance
from ch_launcher.convert.context import Translation
from ch_launcher.convert.errors import UnsupportedFeature
from ch_launcher.kubevirt.quantity import MiB, format_bytes, quantity_bytes
from ch_launcher.kubevirt.vmi import Quantity

VIRTIO_MEM_BLOCK = 128 * MiB
MAX_BYTES = 2**63 - 1  # Cloud Hypervisor's sizes are u64; beyond i64 nothing is a real machine
PAGE_SIZE = 4096
FREE_PAGE_REPORTING_DISABLED_ANNOTATION = "kubevirt.io/free-page-reporting-disabled"


class NoMemoryRequested(UnsupportedFeature):
    """The VMI says nothing about its memory. KubeVirt's wording (vmi-create-admitter.go
    @d923fdb815cd, ValidateVirtualMachineInstanceMandatoryFields), with the first of the three
    fields as its field (KubeVirt leaves it empty, so kubectl printed `: no memory requested`).

    Only a VMI must say it: KubeVirt checks it on VMIs alone, not on the templates of VMs, replica
    sets or pools, since an instancetype may supply the size (applied when the VMI is created); the
    admission webhook drops this problem for templates (admission/rules.py).
    """

    FIELD = "spec.domain.memory.guest"

    def __init__(self) -> None:
        super().__init__(self.FIELD, "no memory requested, at least one of 'spec.domain.memory.guest', "
                                     "'spec.domain.memory.hugepages.pageSize' or "
                                     "'spec.domain.resources.requests.memory' must be set", "FieldValueRequired")


def _bytes(t: Translation, path: str, value: Quantity) -> int | None:
    try:
        n = quantity_bytes(value)
    except ValueError as e:
        t.unsupported(path, f"{path} '{value}' is not a valid quantity: {e}", "FieldValueInvalid")
        return None
    if n <= 0 or n > MAX_BYTES:
        t.unsupported(path, f"{path} '{value}': must be greater than 0 and less than 2^63 bytes.",
                      "FieldValueInvalid")
        return None
    return n


def guest_memory(t: Translation) -> tuple[str, int] | None:
    """(field path, bytes) of the guest's memory by KubeVirt's defaulting order, or None after
    reporting why there is none.

    The memory request and limit are checked even when the size comes from elsewhere: the
    admission webhook's overhead calculator reads them.
    """
    domain = t.vmi.spec.domain
    mem = domain.memory
    candidates: list[tuple[str, Quantity | None]] = [
        ("spec.domain.memory.guest", mem.guest if mem else None),
        ("spec.domain.resources.requests.memory", domain.resources.requests.get("memory")),
        ("spec.domain.resources.limits.memory", domain.resources.limits.get("memory")),
        # a string field, where "" means unset
        ("spec.domain.memory.hugepages.pageSize", (mem.hugepages.pageSize or None) if mem and mem.hugepages else None),
    ]
    given = [(path, value) for path, value in candidates if value is not None]
    if not given:
        t.problems.append(NoMemoryRequested())
        return None
    path, value = given[0]
    n = _bytes(t, path, value)
    for other, other_value in given[1:]:
        if other.startswith("spec.domain.resources."):
            t.quantity(other, other_value)
    return None if n is None else (path, n)


def configure_memory(t: Translation) -> None:
    """Fill `memory` and `balloon`."""
    found = guest_memory(t)
    if found is None:
        return
    size_path, size = found
    mem = t.vmi.spec.domain.memory
    config = MemoryConfig(size=size)
    page = _hugepages(t, config)
    if page:
        if size % page:
            t.unsupported(size_path, f"{size_path} '{format_bytes(size)}' must be a multiple of "
                          f"spec.domain.memory.hugepages.pageSize '{format_bytes(page)}'", "FieldValueInvalid")
            return
    elif size % PAGE_SIZE:
        config.size = size = -(-size // PAGE_SIZE) * PAGE_SIZE  # whole pages; never less than asked
    if mem is not None and mem.maxGuest is not None:
        _hotplug(t, config, size, max(page, VIRTIO_MEM_BLOCK) if page else VIRTIO_MEM_BLOCK)
    if mem is not None and mem.reservedOverhead is not None and mem.reservedOverhead.addedOverhead is not None:
        # read by the admission webhook's overhead calculator
        t.quantity("spec.domain.memory.reservedOverhead.addedOverhead", mem.reservedOverhead.addedOverhead)
    # memLock: Required needs nothing in the config: the VMM inherits the limit virt-handler
    # raises (convert/runtime.py, docs/process-model.md).
    if t.guest_numa and not _numa_zones(t, config, size, page):
        return
    if t.shared_memory_reasons and not page:
        # Hugepages are already mapped shared; otherwise vhost-user and virtio-fs back-ends
        # need guest RAM in a shared memfd (cloud-hypervisor.md §7.2).
        config.shared = True
    t.config.memory = config
    _balloon(t, bool(page))


def _numa_zones(t: Translation, config: MemoryConfig, size: int, page: int) -> bool:
    """Guest NUMA nodes of `numa.guestMappingPassthrough` (compute decided their vCPUs): guest
    memory split over them in whole hugepages as KubeVirt splits it (`numaMapping`, kubevirt
    pkg/virt-launcher/virtwrap/converter/vcpu/vcpu.go@d923fdb815cd: an equal share, the first
    cells one page more for the remainder), each a memory zone bound to its host node. Cloud
    Hypervisor then wants `memory.size` 0 (vmm/src/memory_manager.rs@v53.0); hot-pluggable
    memory goes to the first zone. False after reporting a problem."""
    path = "spec.domain.cpu.numa.guestMappingPassthrough"
    if not page:
        t.unsupported(path, "passing through a numa topology is restricted to VMIs with hugepages enabled",
                      "FieldValueInvalid")
        return False
    cells = len(t.guest_numa)
    if size < cells * page:
        t.unsupported(path, f"not enough memory requested to allocate at least one hugepage per numa node: "
                      f"{format_bytes(size)} < {cells} x {format_bytes(page)}", "FieldValueInvalid")
        return False
    extra = size % (page * cells) // page
    share = (size - extra * page) // cells
    zones = []
    for i, cell in enumerate(t.guest_numa):
        zone = MemoryZoneConfig(id=f"numa{cell.guest_id}", size=share + (page if i < extra else 0), hugepages=True,
                                hugepage_size=page, host_numa_node=cell.host_id, prefault=True)
        zones.append(zone)
    if config.hotplug_size:
        zones[0].hotplug_size, config.hotplug_size = config.hotplug_size, None
    config.size = 0
    config.hugepages = config.hugepage_size = config.prefault = None
    config.zones = zones
    t.config.numa = [NumaConfig(guest_numa_id=cell.guest_id, cpus=list(cell.vcpus), memory_zones=[zone.id],
                                distances=[NumaDistance(destination=d, distance=v) for d, v in cell.distances] or None)
                     for cell, zone in zip(t.guest_numa, zones, strict=True)]
    return True


def _hugepages(t: Translation, config: MemoryConfig) -> int:
    mem = t.vmi.spec.domain.memory
    if mem is None or mem.hugepages is None:
        return 0
    path = "spec.domain.memory.hugepages.pageSize"
    if not mem.hugepages.pageSize:
        t.unsupported(path, f"{path} is required when spec.domain.memory.hugepages is set", "FieldValueRequired")
        return 0
    page = _bytes(t, path, mem.hugepages.pageSize)
    if page is None:
        return 0
    if page & (page - 1) or page < PAGE_SIZE:
        t.unsupported(path, f"{path} '{mem.hugepages.pageSize}' must be a power of two of at least 4Ki",
                      "FieldValueInvalid")
        return 0
    config.hugepages = True
    config.hugepage_size = page
    config.prefault = True  # the pool's pages at boot, as libvirt preallocates them (module docstring)
    return page


def _hotplug(t: Translation, config: MemoryConfig, size: int, block: int) -> None:
    mem = t.vmi.spec.domain.memory
    assert mem is not None and mem.maxGuest is not None
    path = "spec.domain.memory.maxGuest"
    maximum = _bytes(t, path, mem.maxGuest)
    if maximum is None:
        return
    if maximum < size:
        t.unsupported(path, f"{path} '{mem.maxGuest}' must be greater than or equal to the guest memory "
                      f"'{format_bytes(size)}'", "FieldValueInvalid")
        return
    extra = maximum - size
    hotplug = extra // block * block
    if hotplug != extra:
        t.warn(path, f"hot-pluggable memory rounded down to {format_bytes(hotplug)} "
               f"(virtio-mem blocks of {format_bytes(block)})")
    if hotplug:
        config.hotplug_method = "VirtioMem"
        config.hotplug_size = hotplug


def _balloon(t: Translation, hugepages: bool) -> None:
    vmi = t.vmi
    if vmi.spec.domain.devices.autoattachMemBalloon is False:
        return
    cpu = vmi.spec.domain.cpu
    high_performance = hugepages or (cpu is not None and (cpu.dedicatedCpuPlacement or cpu.realtime is not None))
    # VFIO pins guest RAM for DMA; a page the balloon gives back (MADV_DONTNEED, cloud-hypervisor
    # virtio-devices/src/balloon.rs@v53.0) would stay mapped for the device while the guest gets a
    # fresh one. QEMU refuses discards while VFIO is in use (ram_block_discard_disable); Cloud
    # Hypervisor does not, so the launcher never asks for them.
    devices = vmi.spec.domain.devices
    vfio = bool(devices.gpus or devices.hostDevices or any(i.sriov is not None for i in devices.interfaces))
    reporting = not (t.options.free_page_reporting_disabled or high_performance or vfio
                     or vmi.metadata.annotations.get(FREE_PAGE_REPORTING_DISABLED_ANNOTATION) == "true")
    # deflate_on_oom: should anyone inflate the balloon, the guest takes memory back before it
    # OOM-kills a process.
    t.config.balloon = BalloonConfig(size=0, deflate_on_oom=True, free_page_reporting=reporting)

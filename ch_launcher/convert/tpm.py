"""TPM 2.0 (`spec.domain.devices.tpm`): Cloud Hypervisor's CRB device backed by an swtpm the
launcher runs in the pod (pure; `ch_launcher.manager.tpm` starts swtpm).

KubeVirt (`@d923fdb815cd`) gives a VMI with `devices.tpm` (unless `enabled: false`) an emulated
TPM 2.0 that libvirt backs with swtpm; with `persistent: true` its state lives on the VM state
storage PVC (`pkg/storage/backend-storage`), which virt-controller mounts at the swtpm directory
of the compute container (`pkg/virt-controller/services/rendervolumes.go` withBackendStorage,
subPath `swtpm`): `<private-dir>/libvirt/qemu/swtpm` for non-root VMIs (`status.runtimeUser` is
not 0), `/var/lib/libvirt/swtpm` for root ones (`pkg/util/util.go` PathForSwtpm). libvirt keeps
a VM's state in `<that directory>/<domain uuid>/tpm2/`, and the domain UUID is the VMI's stable
firmware UUID, so the state survives the pod. The launcher uses the same directory layout, so
the state is found again after a restart (and is where libvirt would look for it). Without
`persistent` the same directory is in the pod's own storage and ends with it, as upstream.

Cloud Hypervisor (`tpm { socket }`, `tpm/src/emulator.rs@v53.0`) connects to swtpm's control
socket at boot and initialises the TPM (CMD_INIT, TPM2_Startup) itself; it emulates the CRB
interface only, which Windows 11 and Linux (`tpm_crb`) both drive. KubeVirt asks libvirt for
`tpm-tis` (CRB on newer libvirt for TPM 2.0 on q35); the guest sees a TPM 2.0 either way.
"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import TpmConfig
from ch_launcher.convert.context import Translation
from ch_launcher.convert.plan import TpmSpec

DEVICES = "spec.domain.devices"


def configure_tpm(t: Translation) -> None:
    tpm = t.vmi.spec.domain.devices.tpm
    if tpm is None or tpm.enabled is False:
        return
    vmi = t.vmi
    base = f"{t.env.private_dir}/libvirt/qemu/swtpm" if vmi.status.runtimeUser != 0 else t.env.root_swtpm_dir
    platform = t.config.platform
    uuid = (platform.system_uuid if platform is not None else None) or vmi.metadata.uid
    socket = f"{t.vmi_dir}/swtpm.sock"
    t.config.tpm = TpmConfig(socket=socket)
    t.tpm = TpmSpec(socket=socket, state_dir=f"{base}/{uuid}/tpm2", persistent=bool(tpm.persistent),
                    log_file=f"{t.vmi_dir}/swtpm.log")


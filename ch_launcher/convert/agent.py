"""The QEMU guest agent over virtio-vsock, and what KubeVirt does through it (pure).

Cloud Hypervisor has no virtio-serial, so no `org.qemu.guest_agent.0` port; it has virtio-vsock,
and qemu-ga listens on vsock (`qemu-ga --method=vsock-listen --path=<cid>:<port>`). So:

- every VM gets a virtio-vsock device: the one `autoattachVSOCK` asked for (`devices`: with the
  CID virt-controller put in `status.VSOCKCID`), else one with `LOCAL_CID`. The CID is only the
  guest's own address: Cloud Hypervisor's vsock is hybrid, its host end a unix socket in the VMI
  directory and never the host kernel's AF_VSOCK, so no CID can collide with another VM's on the
  node (KubeVirt gives every VM the same CID 3 for the same reason where the host's vsock is
  namespaced: `pkg/vsock/constants.go` `LocalCID`@d923fdb815cd);
- the launcher reaches the agent on guest port `AGENT_PORT` (`plan.guest_agent`), which the guest's
  qemu-ga must listen on: `qemu-ga --method=vsock-listen --path=4294967295:1023` (4294967295 is
  VMADDR_CID_ANY: any CID; qemu-ga 7.2 refuses `-1`). A port below 1024 can only be bound by root
  in the guest (Linux `vsock_bind`), so no unprivileged guest process can pose as the agent;
- `accessCredentials` propagated through `qemuGuestAgent` (SSH public keys for the listed users,
  user passwords) are read from the Secret KubeVirt mounts at
  `<private-dir>/secret/<secret>-access-cred/` and written by the agent
  (`plan.guest_agent.credentials`); those through `noCloud`/`configDrive` are `cloudinit`'s;
- `exec` and `guestAgentPing` probes run `virt-probe`, which asks the launcher's `Exec` and
  `GuestPing`: served through the agent.

Whether a guest runs the agent cannot be known before it boots: what needs the agent is admitted
with a warning saying how the guest must run it.
"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import VsockConfig
from ch_launcher.convert.context import Translation
from ch_launcher.convert.devices import VSOCK_SOCKET
from ch_launcher.convert.plan import AgentCredential, GuestAgentSpec

LOCAL_CID = 3             # the guest's vsock address when the VMI has no CID of its own
VSOCK_ID = "_vsock"       # the device's id: never a VMI device's name (those are DNS labels, without "_")
AGENT_PORT = 1023         # the guest port qemu-ga listens on
VMADDR_CID_ANY = 4294967295
AGENT_COMMAND = f"qemu-ga --method=vsock-listen --path={VMADDR_CID_ANY}:{AGENT_PORT}"
NEEDS_AGENT = (f"needs the QEMU guest agent in the guest, listening on virtio-vsock port {AGENT_PORT} "
               f"(`{AGENT_COMMAND}`; docs/features.md says how to start it)")


def configure_guest_agent(t: Translation) -> None:
    """The vsock device (when `devices` gave none) and where the agent is reached; the access
    credentials the agent propagates; a warning for each feature that needs the agent."""
    if t.config.vsock is None:
        t.config.vsock = VsockConfig(cid=LOCAL_CID, socket=f"{t.vmi_dir}/{VSOCK_SOCKET}")
    t.config.vsock.id = VSOCK_ID  # named in `virtio-device:activated` when the guest's driver takes it
    credentials = _credentials(t)
    t.guest_agent = GuestAgentSpec(socket=t.config.vsock.socket, port=AGENT_PORT, device=VSOCK_ID,
                                   credentials=credentials)
    for name, probe in (("livenessProbe", t.vmi.spec.livenessProbe), ("readinessProbe", t.vmi.spec.readinessProbe)):
        if probe is None:
            continue
        for kind in ("exec", "guestAgentPing"):
            if getattr(probe, kind) is not None:
                t.warn(f"spec.{name}.{kind}", f"spec.{name}.{kind}: virt-probe reaches the guest through the agent: "
                       f"this probe {NEEDS_AGENT}; without it the probe fails")


def _credentials(t: Translation) -> tuple[AgentCredential, ...]:
    """The accessCredentials entries the agent propagates (the others are `cloudinit`'s)."""
    out: list[AgentCredential] = []
    for i, cred in enumerate(t.vmi.spec.accessCredentials):
        base = f"spec.accessCredentials[{i}]"
        if "userPassword" in cred:
            kind, entry, path = "password", cred.get("userPassword"), f"{base}.userPassword"
        elif "sshPublicKey" in cred:
            kind, entry, path = "ssh", cred.get("sshPublicKey"), f"{base}.sshPublicKey"
        else:
            continue  # cloudinit refuses an entry with neither
        entry = entry if isinstance(entry, dict) else {}
        method = entry.get("propagationMethod")
        method = method if isinstance(method, dict) else {}
        if kind == "ssh" and "qemuGuestAgent" not in method:
            continue  # noCloud / configDrive: cloudinit
        source = entry.get("source")
        secret = source.get("secret") if isinstance(source, dict) else None
        secret_name = secret.get("secretName") if isinstance(secret, dict) else None
        if not isinstance(secret_name, str) or not secret_name:
            t.unsupported(f"{path}.source.secret.secretName", f"{path}.source.secret.secretName is required",
                          "FieldValueRequired")
            continue
        users: tuple[str, ...] = ()
        if kind == "ssh":
            agent = method.get("qemuGuestAgent")
            listed = agent.get("users") if isinstance(agent, dict) else None
            users = tuple(u for u in listed if isinstance(u, str) and u) if isinstance(listed, list) else ()
            if not users:
                t.unsupported(f"{path}.propagationMethod.qemuGuestAgent.users",
                              f"{path}.propagationMethod.qemuGuestAgent.users must name at least one user",
                              "FieldValueRequired")
                continue
        t.warn(path, f"{path}: propagated through the QEMU guest agent, which {NEEDS_AGENT}")
        out.append(AgentCredential(field=path, kind=kind, secret_dir=f"{t.env.private_dir}/secret/{secret_name}"
                                   "-access-cred", users=users))
    return tuple(out)

"""cloud-init volumes and `spec.accessCredentials` -> the step that builds the data source ISO
(pure; `ch_launcher.prepare.iso` writes it).

As KubeVirt's `pkg/cloud-init` (`GenerateLocalData`, `@d923fdb815cd`): user and network data
inline (raw, else base64) or from the Secret KubeVirt mounts at `<private-dir>/secret/<vol>/`;
meta-data with the instance id, host name and instancetype; NoCloud (`cidata`) or ConfigDrive
(`config-2`). Only the first cloud-init volume is used, as KubeVirt reads only that one. SSH
keys of access credentials propagated through noCloud/configDrive are read at preparation from
`<private-dir>/secret/<secret>-access-cred/` (those propagated through the guest agent: `agent`).
"""

from __future__ import annotations

import base64
import binascii

from ch_launcher.convert.context import Translation
from ch_launcher.convert.plan import BuildCloudInitIso
from ch_launcher.kubevirt.vmi import CloudInitSource, Volume

INSTANCETYPE_ANNOTATIONS = ("kubevirt.io/cluster-instancetype-name", "kubevirt.io/instancetype-name")
CLOUD_INIT_KINDS = ("cloudInitNoCloud", "cloudInitConfigDrive")


def first_cloud_init_volume(t: Translation) -> str | None:
    """The name of the first cloud-init volume: the one KubeVirt reads
    (cloudinit.ReadCloudInitVolumeDataSource)."""
    for volume in t.vmi.spec.volumes:
        if volume.source_kind in CLOUD_INIT_KINDS:
            return volume.name
    return None


def access_credentials(t: Translation, cloud_init: str | None) -> tuple[str, ...]:
    """Check the `spec.accessCredentials` propagated through cloud-init; return the directories
    holding the SSH keys to put in the cloud-init metadata (`<private-dir>/secret/<secret>-access-cred`,
    as KubeVirt mounts them). Passwords and keys the guest agent writes are `convert.agent`'s."""
    kinds = {v.name: v.source_kind for v in t.vmi.spec.volumes}
    dirs: list[str] = []
    for i, cred in enumerate(t.vmi.spec.accessCredentials):
        base = f"spec.accessCredentials[{i}]"
        if "userPassword" in cred:
            continue  # set by the guest agent (convert.agent)
        ssh = cred.get("sshPublicKey")
        if not isinstance(ssh, dict):
            t.unsupported(base, f"{base} must set sshPublicKey or userPassword", "FieldValueRequired")
            continue
        method = ssh.get("propagationMethod")
        method = method if isinstance(method, dict) else {}
        source = ssh.get("source")
        secret = source.get("secret") if isinstance(source, dict) else None
        secret_name = secret.get("secretName") if isinstance(secret, dict) else None
        mpath = f"{base}.sshPublicKey.propagationMethod"
        if "qemuGuestAgent" in method:
            continue  # written by the guest agent (convert.agent)
        wanted = ("cloudInitNoCloud" if "noCloud" in method
                  else "cloudInitConfigDrive" if "configDrive" in method else "")
        if not wanted:
            t.unsupported(mpath, f"{mpath} must set noCloud, configDrive or qemuGuestAgent", "FieldValueRequired")
            continue
        if cloud_init is None or kinds.get(cloud_init) != wanted:
            t.unsupported(mpath, f"{mpath}: propagation through {'noCloud' if 'noCloud' in method else 'configDrive'} "
                          f"needs a {wanted} volume", "FieldValueInvalid")
            continue
        if not isinstance(secret_name, str) or not secret_name:
            t.unsupported(f"{base}.sshPublicKey.source.secret.secretName",
                          f"{base}.sshPublicKey.source.secret.secretName is required", "FieldValueRequired")
            continue
        dirs.append(f"{t.env.private_dir}/secret/{secret_name}-access-cred")
    return tuple(dirs)


def _decode(t: Translation, path: str, raw: str | None, b64: str | None) -> tuple[bytes | None, bool]:
    """KubeVirt's readRawOrBase64Data: raw text first, else base64. Returns (data, ok)."""
    if raw:
        return raw.encode(), True
    if b64:
        try:
            return base64.b64decode(b64, validate=True), True
        except (binascii.Error, ValueError) as e:
            t.unsupported(path, f"{path} is not valid base64: {e}", "FieldValueInvalid")
            return None, False
    return None, True


def cloud_init_step(t: Translation, vi: int, volume: Volume, kind: str,
                    ssh_key_dirs: tuple[str, ...]) -> BuildCloudInitIso | None:
    """The step that builds the data source ISO of cloud-init volume `vi`; None after reporting
    why there is none."""
    source: CloudInitSource = getattr(volume, kind)
    base = f"spec.volumes[{vi}].{kind}"
    user, ok1 = _decode(t, f"{base}.userDataBase64", source.userData, source.userDataBase64)
    network, ok2 = _decode(t, f"{base}.networkDataBase64", source.networkData, source.networkDataBase64)
    if not (ok1 and ok2):
        return None
    secret_dir = f"{t.env.private_dir}/secret/{volume.name}"
    user_sources = (f"{secret_dir}/userdata", f"{secret_dir}/userData") if source.secretRef else ()
    network_sources = (f"{secret_dir}/networkdata", f"{secret_dir}/networkData") if source.networkDataSecretRef else ()
    if user is None and network is None and not user_sources and not network_sources:
        t.unsupported(base, f"{base}: userDataBase64, userData, networkDataBase64 or networkData is required for "
                      "a cloud-init data source", "FieldValueRequired")
        return None
    vmi = t.vmi
    firmware = vmi.spec.domain.firmware
    # KubeVirt uses spec.domain.firmware.uuid, which its mutating webhook always sets; without
    # one, the VMI's uid (stable across launcher restarts) rather than a random UUID.
    instance_uuid = (firmware.uuid if firmware and firmware.uuid else "") or vmi.metadata.uid
    hostname = vmi.spec.hostname or vmi.metadata.name.split(".")[0][:63]  # dns.SanitizeHostname
    instance_type = next((vmi.metadata.annotations[a] for a in INSTANCETYPE_ANNOTATIONS
                          if vmi.metadata.annotations.get(a)), "")
    meta: list[tuple[str, str]] = []
    if kind == "cloudInitNoCloud":
        if instance_type:
            meta.append(("instance-type", instance_type))
        meta += [("instance-id", instance_uuid), ("local-hostname", hostname)]
        data_source, file = "noCloud", "noCloud.iso"
    else:
        if instance_type:
            meta.append(("instance_type", instance_type))
        meta += [("instance_id", f"{vmi.metadata.name}.{vmi.metadata.namespace}"), ("hostname", hostname),
                 ("uuid", instance_uuid)]
        data_source, file = "configDrive", "configdrive.iso"
    iso = f"{t.env.ephemeral_disk_dir}/cloud-init-data/{vmi.metadata.namespace}/{vmi.metadata.name}/{file}"
    return BuildCloudInitIso(field=base, path=iso, data_source=data_source, meta_data=tuple(meta),
                             user_data=user, user_data_sources=user_sources, network_data=network,
                             network_data_sources=network_sources, ssh_key_dirs=ssh_key_dirs)

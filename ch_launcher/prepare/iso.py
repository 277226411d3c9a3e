"""ISO 9660 images: cloud-init data sources and config volumes.

What goes into each image is decided here; the image itself is written in-process by
`ch_launcher.prepare.isowriter`.

Like KubeVirt's (`xorrisofs -joliet -rock`), the images carry Rock Ridge names (what Linux
shows) and Joliet names (what Windows shows) beside the ISO 9660 ones, and the volume label
cloud-init looks for: `cidata` (NoCloud) or `config-2` (ConfigDrive); config volumes use
their `volumeLabel`, by default `cfgdata` (pkg/config/config.go@d923fdb815cd).

ISOs are rebuilt on every preparation, as KubeVirt regenerates them whenever it defines the
domain: their content comes from the VMI and the mounted Secrets/ConfigMaps, never from the
guest. Each is written to a staging file and renamed into place, so a running VM that still
has the old image open keeps reading a whole file.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from collections.abc import Iterable

from ch_launcher.convert.plan import BuildCloudInitIso, BuildIso
from ch_launcher.prepare import isowriter
from ch_launcher.prepare.errors import PreparationError

log = logging.getLogger(__name__)


def _is_hidden(name: str) -> bool:
    # Kubernetes' atomic writer keeps `..data` and `..<timestamp>` beside the keys of a mounted
    # Secret or ConfigMap; the keys are symlinks through them. Only the keys belong in the image.
    return name.startswith("..")


def collect_dir(source_dir: str, prefix: str = "") -> list[tuple[str, str]]:
    """(path in the image, file on disk) for every file under `source_dir`, following symlinks
    and skipping the atomic writer's `..` entries. Sorted, so images are reproducible."""
    out: list[tuple[str, str]] = []
    for name in sorted(os.listdir(source_dir)):
        if _is_hidden(name):
            continue
        full = os.path.join(source_dir, name)
        rel = f"{prefix}{name}"
        if os.path.isdir(full):
            out.extend(collect_dir(full, rel + "/"))
        elif os.path.isfile(full):
            out.append((rel, full))
    return out


def write_iso(path: str, label: str, files: Iterable[tuple[str, bytes]]) -> None:
    """Write an ISO with `label` holding `files` (relative path, content), atomically. Raises
    OSError, or ValueError for a file path the image cannot hold."""
    isowriter.write_image(path, label, files)


def build_iso(step: BuildIso) -> None:
    """A config volume (configMap, secret, downwardAPI, serviceAccount) or any listed files as
    an ISO. A missing source directory is an error; a missing optional file is skipped."""
    files: list[tuple[str, bytes]] = []
    try:
        if step.source_dir is not None:
            if not os.path.isdir(step.source_dir):
                raise PreparationError(step.field, f"{step.field}: the mounted volume directory {step.source_dir} "
                                       "is missing")
            for rel, full in collect_dir(step.source_dir):
                with open(full, "rb") as f:
                    files.append((rel, f.read()))
        for item in step.files:
            if item.data is not None:
                files.append((item.name, item.data))
            elif item.source is not None:
                try:
                    with open(item.source, "rb") as f:
                        files.append((item.name, f.read()))
                except FileNotFoundError:
                    if not item.optional:
                        raise PreparationError(step.field, f"{step.field}: {item.source} is missing") from None
        write_iso(step.path, step.volume_label, files)
    except PreparationError:
        raise
    except (OSError, ValueError) as e:
        raise PreparationError(step.field, f"{step.field}: cannot build the ISO {step.path}: {e}") from None
    log.info("built ISO %s (label %s, %d files) for %s", step.path, step.volume_label, len(files), step.field)


def _first_found(sources: tuple[str, ...]) -> bytes | None:
    for source in sources:
        try:
            with open(source, "rb") as f:
                return f.read()
        except FileNotFoundError:
            continue
    return None


def _ssh_keys(step: BuildCloudInitIso) -> dict[str, str]:
    """KubeVirt's resolveSSHPublicKeys: every non-empty file of each access-credential Secret
    directory, numbered "0", "1", ... in order."""
    keys: dict[str, str] = {}
    for directory in step.ssh_key_dirs:
        if not os.path.isdir(directory):
            raise PreparationError(step.field, f"{step.field}: the SSH key Secret directory {directory} "
                                   "(spec.accessCredentials) is missing")
        for name in sorted(os.listdir(directory)):
            full = os.path.join(directory, name)
            if _is_hidden(name) or os.path.isdir(full):
                continue
            with open(full, "rb") as f:
                key = f.read().decode(errors="replace")
            if key:
                keys[str(len(keys))] = key
    return keys


def cloud_init_files(step: BuildCloudInitIso) -> tuple[str, list[tuple[str, bytes]]]:
    """(volume label, files) of the data source, as KubeVirt's GenerateLocalData lays them out."""
    user = step.user_data if step.user_data is not None else _first_found(step.user_data_sources)
    network = step.network_data if step.network_data is not None else _first_found(step.network_data_sources)
    if not user and not network:
        tried = ", ".join(step.user_data_sources + step.network_data_sources)
        where = f" (looked for {tried})" if tried else ""
        raise PreparationError(step.field, f"{step.field}: no cloud-init user data or network data found{where}")
    meta: dict[str, object] = dict(step.meta_data)
    keys = _ssh_keys(step)
    if step.data_source == "noCloud":
        if keys:
            meta["public-keys"] = keys
        label, layout = "cidata", ("user-data", "meta-data", "network-config")
    elif step.data_source == "configDrive":
        if keys:
            meta["public_keys"] = keys
        label = "config-2"
        layout = ("openstack/latest/user_data", "openstack/latest/meta_data.json",
                  "openstack/latest/network_data.json")
    else:
        raise PreparationError(step.field, f"{step.field}: unknown cloud-init data source {step.data_source!r}")
    files = [(layout[0], user or b""), (layout[1], json.dumps(meta, separators=(",", ":")).encode())]
    if network:
        files.append((layout[2], network))
    return label, files


def build_cloud_init_iso(step: BuildCloudInitIso) -> None:
    """The NoCloud or ConfigDrive ISO of a cloud-init volume."""
    try:
        label, files = cloud_init_files(step)
        write_iso(step.path, label, files)
    except PreparationError:
        raise
    except (OSError, ValueError) as e:
        raise PreparationError(step.field, f"{step.field}: cannot build the cloud-init ISO {step.path}: {e}") from None
    log.info("built cloud-init ISO %s (%s) for %s", step.path, posixpath.basename(step.path), step.field)

"""The ISO writer as a short-lived child process: `python .../ch_launcher/prepare/isowriter.py`.

pycdlib (16 modules, about 2 MiB of a launcher's memory that would stay for the life of the VM,
bench/footprint.py) is imported only here, in a child the launcher runs while it prepares a VM
with cloud-init or config volumes and that exits once the image is written: VMIs without such
volumes never pay for it, the others pay for it only while their ISOs are built.

It imports nothing of the launcher (it runs by path, so that the package ch_launcher.prepare and
the translator behind it are not imported). Protocol: the request on stdin is JSON
`{"path", "label", "files": [[relative path, base64 content], ...]}`; the child writes the
image (`write_image`, atomically) and prints `written` on stdout, or prints `error: <message>`
and exits 1. The parent judges by what was printed, not only by the exit status, because a
launcher running as PID 1 reaps zombies and may collect that status first (ch_launcher/cli.py
`reap_orphans`).
"""

from __future__ import annotations

import base64
import io
import json
import os
import sys
from collections.abc import Iterable

JOLIET_MAX_NAME = 64  # UCS-2 characters per Joliet name component
JOLIET_MAX_LABEL = 16  # the volume identifier's 32 bytes hold 16 UCS-2 characters


def write_image(path: str, label: str, files: Iterable[tuple[str, bytes]]) -> None:
    """Write an ISO with `label` holding `files` (relative path, content), atomically.

    Joliet names are left out when a name or the label is too long for Joliet (the ISO 9660
    label holds 32 characters, Joliet's 16); Rock Ridge names are always there.
    Raises PyCdlibException or OSError."""
    import pycdlib

    entries = sorted(files)
    names = {part for rel, _ in entries for part in rel.split("/")}
    joliet = len(label) <= JOLIET_MAX_LABEL and all(len(n) <= JOLIET_MAX_NAME for n in names)
    iso = pycdlib.PyCdlib()
    # Interchange level 4 keeps names as they are; Rock Ridge 1.09 is what Linux mounts read.
    iso.new(interchange_level=4, vol_ident=label, joliet=3 if joliet else None, rock_ridge="1.09")
    made: set[str] = set()
    try:
        for rel, data in entries:
            parts = rel.split("/")
            for depth in range(1, len(parts)):
                d = "/" + "/".join(parts[:depth])
                if d not in made:
                    iso.add_directory(iso_path=d, rr_name=parts[depth - 1], joliet_path=d if joliet else None)
                    made.add(d)
            target = "/" + rel
            iso.add_fp(io.BytesIO(data), len(data), iso_path=target, rr_name=parts[-1],
                       joliet_path=target if joliet else None)
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        staging = f"{path}.staging"
        try:
            iso.write(staging)
            os.chmod(staging, 0o640)
            os.replace(staging, path)
        except BaseException:
            if os.path.lexists(staging):
                os.unlink(staging)
            raise
    finally:
        iso.close()


def encode_request(path: str, label: str, files: Iterable[tuple[str, bytes]]) -> bytes:
    return json.dumps({"path": path, "label": label,
                       "files": [[rel, base64.b64encode(data).decode()] for rel, data in files]}).encode()


def main() -> int:
    try:
        request = json.loads(sys.stdin.buffer.read())
        files = [(rel, base64.b64decode(data)) for rel, data in request["files"]]
        write_image(request["path"], request["label"], files)
    except Exception as e:  # noqa: BLE001 - every failure goes back to the parent as text
        print(f"error: {e}", flush=True)
        return 1
    print("written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

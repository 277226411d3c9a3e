"""Console devices: the legacy serial port and virtio-console, always set explicitly (pure).

Cloud Hypervisor's defaults would attach virtio-console to the VMM's own stdin/stdout (`Tty`)
and the serial port to nothing (cloud-hypervisor.md §7.1), so both are always set:

- serial (ttyS0, what KubeVirt's console shows): `mode: Socket` at `<vmi-dir>/ch-serial`, where
  Cloud Hypervisor listens; the launcher's console bridge connects there and serves
  virt-handler's `virt-serial0` and the serial log. The path is recorded in
  `Translation.serial_socket`. `autoattachSerialConsole: false` turns the port `Off`.
- virtio-console (hvc0): `Off`. KubeVirt's console is the serial port; an hvc0 nobody reads
  would only buffer.

Unix socket paths are limited to 107 bytes, so the name is short; a `--private-dir` long enough
to exceed the limit is reported at launch (at admission the directory is not known).
"""

from __future__ import annotations

from ch_launcher.ch.vmconfig import ConsoleConfig, SerialConfig
from ch_launcher.convert.context import Translation

SERIAL_SOCKET_NAME = "ch-serial"
UNIX_PATH_MAX = 107


def configure_console(t: Translation) -> None:
    """Fill `serial` and `console`, and `Translation.serial_socket`."""
    t.config.console = ConsoleConfig(mode="Off")
    if t.vmi.spec.domain.devices.autoattachSerialConsole is False:
        t.config.serial = SerialConfig(mode="Off")
        t.serial_socket = None
        return
    path = f"{t.vmi_dir}/{SERIAL_SOCKET_NAME}"
    if t.env.pod is not None and len(path.encode()) > UNIX_PATH_MAX:
        t.unsupported("spec.domain.devices.autoattachSerialConsole",
                      f"the serial console socket {path} is {len(path.encode())} bytes long, over the "
                      f"{UNIX_PATH_MAX}-byte limit of unix socket paths: start the launcher with a shorter "
                      "--private-dir", "FieldValueInvalid")
        return
    t.config.serial = SerialConfig(mode="Socket", socket=path)
    t.serial_socket = path

"""Console devices: the serial port on a short socket in the VMI's directory, virtio-console off."""

from __future__ import annotations

from ch_launcher.convert import LauncherEnv
from tests.unit.convert.vmibuild import UID, api, fields, launcher_env, run, vmi


def test_the_serial_port_listens_on_a_socket_in_the_vmi_directory_and_virtio_console_is_off() -> None:
    verdict = run(vmi(), launcher_env(private_dir="/var/run/kubevirt-private"))
    socket = f"/var/run/kubevirt-private/{UID}/ch-serial"
    config = api(verdict)
    assert config["serial"] == {"mode": "Socket", "socket": socket}
    assert config["console"] == {"mode": "Off"}  # never CH's default Tty on the VMM's stdio
    assert verdict.plan is not None and verdict.plan.serial_socket == socket
    assert len(socket.encode()) <= 107


def test_no_serial_console_turns_the_serial_port_off() -> None:
    verdict = run(vmi({"devices": {"autoattachSerialConsole": False}}))
    config = api(verdict)
    assert config["serial"] == {"mode": "Off"} and config["console"] == {"mode": "Off"}
    assert verdict.plan is not None and verdict.plan.serial_socket is None


def test_a_private_dir_too_long_for_a_unix_socket_is_reported_at_launch_only() -> None:
    long_dir = "/tmp/" + "d" * 80
    launch = run(vmi(), launcher_env(private_dir=long_dir))
    assert fields(launch.problems) == ["spec.domain.devices.autoattachSerialConsole"]
    assert "107-byte limit" in launch.problems[0].message and "--private-dir" in launch.problems[0].message
    assert run(vmi(), LauncherEnv(private_dir=long_dir)).allowed  # admission knows no directories

"""RequireFile and WaitForSocket: clear errors naming the field and the path, bounded waits."""

from __future__ import annotations

import os
import pathlib
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator

import pytest

from ch_launcher.convert.plan import RequireFile, WaitForSocket
from ch_launcher.prepare import PreparationError
from ch_launcher.prepare.files import require_file, wait_for_socket
from tests.builders import new_vmi, with_devices, with_domain, with_memory, with_namespace, with_uid

FW = "spec.domain.firmware.bootloader"


@pytest.fixture
def short_dir() -> Iterator[pathlib.Path]:
    """A directory with a path short enough for unix sockets."""
    d = tempfile.mkdtemp(prefix="kc", dir="/tmp")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


def test_a_present_file_is_accepted_through_a_symlink(tmp_path: pathlib.Path) -> None:
    (tmp_path / "hypervisor-fw").write_bytes(b"fw")
    os.symlink("hypervisor-fw", tmp_path / "link")
    require_file(RequireFile(field=FW, path=str(tmp_path / "link"), what="firmware hypervisor-fw"))


def test_a_missing_firmware_is_an_error_naming_it_and_its_path(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "hypervisor-fw")
    with pytest.raises(PreparationError) as e:
        require_file(RequireFile(field=FW, path=path, what="firmware hypervisor-fw (--firmware-dir)"))
    assert e.value.field == FW
    assert e.value.message == f"{FW}: firmware hypervisor-fw (--firmware-dir) is missing: {path} does not exist"


@pytest.mark.parametrize("efi", [True, False])
def test_only_a_missing_efi_firmware_says_the_phrase_that_makes_virt_handler_fail_the_vmi(
        tmp_path: pathlib.Path, efi: bool) -> None:
    from ch_launcher.convert import LauncherEnv, translate
    from ch_launcher.prepare import execute

    bootloader = {"efi": {"secureBoot": False}} if efi else {"bios": {}}
    vmi = new_vmi("v", with_namespace("n"), with_uid("u"), with_domain(firmware={"bootloader": bootloader}),
                  with_memory("64Mi"), with_devices(autoattachPodInterface=False))
    plan = translate(vmi, LauncherEnv(firmware_dir=str(tmp_path)))
    with pytest.raises(PreparationError) as e:
        execute(plan)
    # kubevirt pkg/virt-handler/vm.go: a Sync error containing it makes the VMI Failed at once.
    assert ("EFI OVMF rom missing" in e.value.message) is efi
    assert ("CLOUDHV.fd" if efi else "hypervisor-fw") in e.value.message


def test_a_directory_is_not_a_file(tmp_path: pathlib.Path) -> None:
    with pytest.raises(PreparationError, match="is not a file"):
        require_file(RequireFile(field=FW, path=str(tmp_path), what="firmware"))


def test_a_regular_file_is_not_a_block_device(tmp_path: pathlib.Path) -> None:
    (tmp_path / "d").write_bytes(b"")
    with pytest.raises(PreparationError, match="is not a block device"):
        require_file(RequireFile(field="spec.volumes[0].persistentVolumeClaim", path=str(tmp_path / "d"),
                                 what="block device of volume d", block_device=True))


def listen(path: pathlib.Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.listen(1)
    return s


def test_a_socket_that_appears_later_ends_the_wait(short_dir: pathlib.Path) -> None:
    path = short_dir / "vhost.sock"
    servers: list[socket.socket] = []
    timer = threading.Timer(0.2, lambda: servers.append(listen(path)))
    timer.start()
    try:
        wait_for_socket(WaitForSocket(field="spec.domain.devices.filesystems[0]", path=str(path),
                                      what="virtiofsd socket", timeout_seconds=10), time.monotonic() + 10)
        assert path.is_socket()
    finally:
        timer.join()
        for s in servers:
            s.close()


def test_a_socket_that_never_appears_fails_within_its_timeout(short_dir: pathlib.Path) -> None:
    step = WaitForSocket(field="spec.domain.devices.filesystems[0]", path=str(short_dir / "none.sock"),
                         what="virtiofsd socket", timeout_seconds=0.3)
    start = time.monotonic()
    with pytest.raises(PreparationError) as e:
        wait_for_socket(step, time.monotonic() + 60)
    assert time.monotonic() - start < 5  # bounded (generous: the machine is shared)
    assert e.value.message == (f"spec.domain.devices.filesystems[0]: virtiofsd socket did not appear: "
                               f"{step.path} does not exist after waiting up to 0.3 s")


def test_the_overall_deadline_cuts_a_long_wait_short(short_dir: pathlib.Path) -> None:
    step = WaitForSocket(field="f", path=str(short_dir / "none.sock"), what="socket", timeout_seconds=3600)
    start = time.monotonic()
    with pytest.raises(PreparationError):
        wait_for_socket(step, time.monotonic() + 0.2)
    assert time.monotonic() - start < 5


def test_a_file_where_a_socket_should_be_is_reported_as_such(short_dir: pathlib.Path) -> None:
    (short_dir / "plain").write_bytes(b"")
    step = WaitForSocket(field="f", path=str(short_dir / "plain"), what="socket", timeout_seconds=0.1)
    with pytest.raises(PreparationError, match="exists but is not a socket"):
        wait_for_socket(step, time.monotonic() + 10)

"""The qcow2 v3 overlay writer, judged by qemu-img, and image format detection."""

from __future__ import annotations

import pathlib
import struct
import subprocess
from typing import Any

import pytest

from ch_launcher.prepare.qcow2 import CLUSTER_SIZE, ImageError, inspect_image, overlay_bytes, write_overlay

GiB = 2**30


def raw(path: pathlib.Path, size: int) -> str:
    with open(path, "wb") as f:
        f.truncate(size)
    return str(path)


@pytest.mark.parametrize("size", [0, 512, 1000, 50 * 2**20, 10 * GiB + 1, 3 * 2**40])
def test_an_overlay_over_a_raw_image_passes_qemu_img_check_with_its_backing_file_and_size(
        tmp_path: pathlib.Path, qemu_img: Any, size: int) -> None:
    backing = raw(tmp_path / "base.img", size)
    overlay = str(tmp_path / "disk.qcow2")
    write_overlay(overlay, backing, "raw", size)
    info = qemu_img("info", "--output=json", overlay)
    assert info["format"] == "qcow2"
    assert info["backing-filename"] == backing and info["backing-filename-format"] == "raw"
    assert info["virtual-size"] == -(-size // 512) * 512
    assert info["format-specific"]["data"]["compat"] == "1.1"  # version 3
    qemu_img("check", overlay)  # raises on any error, leak or corruption


def test_an_overlay_over_a_qcow2_image_records_the_qcow2_format(tmp_path: pathlib.Path, qemu_img: Any) -> None:
    base = str(tmp_path / "base.qcow2")
    qemu_img("create", "-q", "-f", "qcow2", base, "3G")
    found = inspect_image(base)
    assert (found.format, found.virtual_size, found.backing_file) == ("qcow2", 3 * GiB, "")
    overlay = str(tmp_path / "disk.qcow2")
    write_overlay(overlay, base, found.format, found.virtual_size)
    info = qemu_img("info", "--output=json", overlay)
    assert (info["backing-filename-format"], info["virtual-size"]) == ("qcow2", 3 * GiB)
    qemu_img("check", overlay)


def test_reads_see_the_backing_image_and_writes_stay_in_the_overlay(tmp_path: pathlib.Path, qemu_img: Any) -> None:
    backing = tmp_path / "base.img"
    backing.write_bytes(b"B" * 4096 + b"\0" * (2**20 - 4096))
    overlay = str(tmp_path / "disk.qcow2")
    write_overlay(overlay, str(backing), "raw", 2**20)
    io = "qemu-io"
    subprocess.run([io, "-c", "read -P 0x42 0 4096", overlay], check=True, capture_output=True, timeout=30)
    subprocess.run([io, "-c", "write -P 0x5a 0 512", overlay], check=True, capture_output=True, timeout=30)
    out = subprocess.run([io, "-c", "read -P 0x5a 0 512", overlay], check=True, capture_output=True, text=True,
                         timeout=30).stdout
    assert "Pattern verification failed" not in out
    assert backing.read_bytes()[:4096] == b"B" * 4096  # the backing image is untouched
    qemu_img("check", overlay)


def test_the_overlay_is_small_and_sparse(tmp_path: pathlib.Path) -> None:
    overlay = tmp_path / "disk.qcow2"
    write_overlay(str(overlay), raw(tmp_path / "b", 100 * GiB), "raw", 100 * GiB)
    st = overlay.stat()
    assert st.st_size == 4 * CLUSTER_SIZE  # header, refcount table, refcount block, one L1 cluster
    assert st.st_blocks * 512 <= 4 * CLUSTER_SIZE


def test_writing_an_overlay_leaves_no_temporary_file(tmp_path: pathlib.Path) -> None:
    write_overlay(str(tmp_path / "disk.qcow2"), raw(tmp_path / "b", 2**20), "raw", 2**20)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b", "disk.qcow2"]


@pytest.mark.parametrize("backing, fmt, size", [("", "raw", 1), ("x" * 1024, "raw", 1), ("/b", "vmdk", 1),
                                                ("/b", "raw", -1)])
def test_invalid_overlay_arguments_are_refused(backing: str, fmt: str, size: int) -> None:
    with pytest.raises(ImageError):
        overlay_bytes(size, backing, fmt)


@pytest.mark.parametrize("magic, name", [(b"KDMV", "vmdk"), (b"vhdxfile", "vhdx"), (b"conectix", "vpc")])
def test_images_in_other_formats_are_named_and_refused(tmp_path: pathlib.Path, magic: bytes, name: str) -> None:
    path = tmp_path / "img"
    path.write_bytes(magic + b"\0" * 600)
    with pytest.raises(ImageError, match=f"is a {name} image"):
        inspect_image(str(path))


def test_anything_else_is_raw_as_qemu_would_probe_it(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "img"
    path.write_bytes(b"\x7fELF" + b"\0" * 1000)
    assert inspect_image(str(path)).format == "raw"


def test_a_qcow2_backing_file_of_the_image_is_reported(tmp_path: pathlib.Path, qemu_img: Any) -> None:
    base = str(tmp_path / "base.img")
    raw(tmp_path / "base.img", 2**20)
    chained = str(tmp_path / "chained.qcow2")
    qemu_img("create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", chained)
    assert inspect_image(chained).backing_file == base


def test_a_truncated_qcow2_header_is_an_image_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "img"
    path.write_bytes(b"QFI\xfb" + struct.pack(">I", 3))
    with pytest.raises(ImageError):
        inspect_image(str(path))

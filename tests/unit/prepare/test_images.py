"""Overlays and sparse images: made once, never destroyed on a second run, clear errors."""

from __future__ import annotations

import os
import pathlib
from typing import Any

import pytest

from ch_launcher.convert.plan import CreateOverlay, CreateSparseImage
from ch_launcher.prepare import PreparationError
from ch_launcher.prepare.images import create_overlay, create_sparse_image

MiB = 2**20
FIELD = "spec.volumes[0].containerDisk"


def overlay_step(tmp_path: pathlib.Path, backing_format: str = "") -> CreateOverlay:
    return CreateOverlay(field=FIELD, path=str(tmp_path / "disk-data" / "root" / "disk.qcow2"),
                         backing=str(tmp_path / "disk_0.img"), backing_format=backing_format)


def test_an_overlay_is_made_over_the_container_image_in_a_new_directory(tmp_path: pathlib.Path, qemu_img: Any) -> None:
    (tmp_path / "disk_0.img").write_bytes(b"\0" * MiB)
    step = overlay_step(tmp_path)
    create_overlay(step)
    info = qemu_img("info", "--output=json", step.path)
    assert info["backing-filename"] == step.backing and info["backing-filename-format"] == "raw"


def test_an_existing_overlay_keeps_what_the_guest_wrote(tmp_path: pathlib.Path) -> None:
    (tmp_path / "disk_0.img").write_bytes(b"\0" * MiB)
    step = overlay_step(tmp_path)
    create_overlay(step)
    with open(step.path, "r+b") as f:
        f.seek(5 * 65536)
        f.write(b"guest data")
    create_overlay(step)  # a launcher restart
    with open(step.path, "rb") as f:
        f.seek(5 * 65536)
        assert f.read(10) == b"guest data"


def test_a_missing_container_image_names_the_volume_and_the_path(tmp_path: pathlib.Path) -> None:
    step = overlay_step(tmp_path)
    with pytest.raises(PreparationError) as e:
        create_overlay(step)
    assert e.value.field == FIELD
    assert e.value.message.startswith(f"{FIELD}: the disk image {step.backing} is missing")
    assert not os.path.exists(step.path)


def test_a_container_image_with_its_own_backing_file_is_refused(tmp_path: pathlib.Path, qemu_img: Any) -> None:
    (tmp_path / "host-secret").write_bytes(b"\0" * MiB)
    qemu_img("create", "-q", "-f", "qcow2", "-b", str(tmp_path / "host-secret"), "-F", "raw",
             str(tmp_path / "disk_0.img"))
    with pytest.raises(PreparationError, match="with a backing file"):
        create_overlay(overlay_step(tmp_path))


def test_a_container_image_in_another_format_is_refused_by_name(tmp_path: pathlib.Path) -> None:
    (tmp_path / "disk_0.img").write_bytes(b"KDMV" + b"\0" * 1024)
    with pytest.raises(PreparationError, match="is a vmdk image"):
        create_overlay(overlay_step(tmp_path))


def test_an_ephemeral_overlay_takes_the_given_format_without_probing(tmp_path: pathlib.Path, qemu_img: Any) -> None:
    (tmp_path / "disk_0.img").write_bytes(b"QFI\xfb" + b"\0" * (MiB - 4))  # a raw PVC whose data looks like qcow2
    step = overlay_step(tmp_path, "raw")
    create_overlay(step)
    assert qemu_img("info", "--output=json", step.path)["backing-filename-format"] == "raw"


def sparse(tmp_path: pathlib.Path, size: int, **kw: Any) -> CreateSparseImage:
    return CreateSparseImage(field="spec.volumes[1].emptyDisk", path=str(tmp_path / "empty-disks" / "e.img"),
                             size=size, **kw)


def test_a_sparse_image_has_its_size_and_takes_no_space(tmp_path: pathlib.Path) -> None:
    step = sparse(tmp_path, 8 * 2**30)
    create_sparse_image(step)
    st = os.stat(step.path)
    assert st.st_size == 8 * 2**30 and st.st_blocks == 0


def test_an_existing_image_is_never_overwritten(tmp_path: pathlib.Path) -> None:
    step = sparse(tmp_path, MiB)
    create_sparse_image(step)
    with open(step.path, "r+b") as f:
        f.write(b"user data")
    create_sparse_image(sparse(tmp_path, 4 * MiB))
    assert os.path.getsize(step.path) == MiB
    assert pathlib.Path(step.path).read_bytes()[:9] == b"user data"


def test_overwrite_recreates_the_image(tmp_path: pathlib.Path) -> None:
    create_sparse_image(sparse(tmp_path, MiB))
    pathlib.Path(tmp_path / "empty-disks" / "e.img").write_bytes(b"old")
    create_sparse_image(sparse(tmp_path, 2 * MiB, overwrite=True))
    data = (tmp_path / "empty-disks" / "e.img").read_bytes()
    assert len(data) == 2 * MiB and data[:3] == b"\0\0\0"


def test_an_image_on_an_unmounted_volume_is_not_created(tmp_path: pathlib.Path) -> None:
    step = CreateSparseImage(field="spec.volumes[0].persistentVolumeClaim", path=str(tmp_path / "vmi-disks/d/disk.img"),
                             size=MiB, create_parent=False)
    with pytest.raises(PreparationError, match="is the volume mounted"):
        create_sparse_image(step)
    assert not (tmp_path / "vmi-disks").exists()


def test_a_volume_a_little_too_small_gets_an_image_of_its_free_space(tmp_path: pathlib.Path) -> None:
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    step = sparse(tmp_path, free + free // 50, tolerate_less_space_percent=10)  # 2 % too big
    create_sparse_image(step)
    size = os.path.getsize(step.path)
    assert 0 < size <= free and size % MiB == 0


def test_a_volume_far_too_small_is_an_error(tmp_path: pathlib.Path) -> None:
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    step = sparse(tmp_path, free * 2, tolerate_less_space_percent=10)
    with pytest.raises(PreparationError, match="not enough space"):
        create_sparse_image(step)
    assert not os.path.exists(step.path)


# --- a claim that grew while the VM was stopped (convert.expansion) ---------------------------

def expand_step(path: pathlib.Path, capacity: int, overhead: str | None = "0") -> Any:
    from ch_launcher.convert.expansion import DiskSizing
    from ch_launcher.convert.plan import ExpandImage

    return ExpandImage(field="spec.volumes[0]", sizing=DiskSizing("data", str(path), False, capacity, overhead))


def test_an_image_smaller_than_its_claim_allows_is_grown_sparse_before_boot(tmp_path: pathlib.Path) -> None:
    from ch_launcher.prepare.images import expand_image

    image = tmp_path / "disk.img"
    image.write_bytes(b"data" + b"\0" * (MiB - 4))
    expand_image(expand_step(image, 8 * MiB, "0.25"))
    assert image.stat().st_size == 6 * MiB and image.read_bytes()[:4] == b"data"
    assert image.stat().st_blocks * 512 < 2 * MiB  # the new space is a hole


def test_an_image_is_never_shrunk_and_a_missing_overhead_leaves_it_alone(tmp_path: pathlib.Path) -> None:
    from ch_launcher.prepare.images import expand_image

    image = tmp_path / "disk.img"
    image.write_bytes(b"\0" * (4 * MiB))
    expand_image(expand_step(image, 2 * MiB))
    expand_image(expand_step(image, 16 * MiB, None))
    assert image.stat().st_size == 4 * MiB


def test_an_image_that_cannot_be_grown_is_logged_and_the_vm_starts_with_it(tmp_path: pathlib.Path,
                                                                          caplog: Any) -> None:
    from ch_launcher.prepare.images import expand_image

    expand_image(expand_step(tmp_path / "missing.img", 16 * MiB))  # no exception
    assert "failed to expand disk image" in caplog.text

"""execute(): runs a translated plan's steps in order, stops at the first failure, runs again safely."""

from __future__ import annotations

import pathlib
from dataclasses import dataclass

import pytest

from ch_launcher.convert import LauncherEnv, PodFacts, translate
from ch_launcher.convert.plan import CreateSparseImage, RequireFile, Step
from ch_launcher.prepare import PreparationError, execute
from tests.builders import CLOUD_CONFIG, new_vmi, with_empty_disk, with_memory, with_namespace, with_uid, with_volume


def layout(root: pathlib.Path) -> LauncherEnv:
    return LauncherEnv(private_dir=str(root / "private"), share_dir=str(root / "share"),
                       ephemeral_disk_dir=str(root / "ephemeral"), container_disk_dir=str(root / "cd"),
                       firmware_dir=str(root / "fw"), pod=PodFacts(cpuset=(0, 1)))


def body() -> dict[str, object]:
    return new_vmi("vm", with_namespace("ns"), with_uid("u1"), with_memory("256Mi"),
                   with_empty_disk("scratch", "64Mi"),
                   with_volume({"name": "ci", "cloudInitNoCloud": {"userData": CLOUD_CONFIG}}))


def test_a_translated_plan_prepares_every_file_its_config_names(tmp_path: pathlib.Path) -> None:
    (tmp_path / "fw").mkdir()
    (tmp_path / "fw" / "hypervisor-fw").write_bytes(b"fw")
    plan = translate(body(), layout(tmp_path))
    execute(plan)
    assert plan.config.disks is not None
    for disk in plan.config.disks:
        assert disk.path is not None and pathlib.Path(disk.path).is_file(), disk


def test_the_first_failing_step_stops_the_run_with_its_field(tmp_path: pathlib.Path) -> None:
    plan = translate(body(), layout(tmp_path))  # no firmware in fw/
    with pytest.raises(PreparationError) as e:
        execute(plan)
    assert e.value.field == "spec.domain.firmware.bootloader"
    assert not (tmp_path / "ephemeral").exists()  # later steps did not run


def test_running_a_plan_twice_keeps_the_guests_data(tmp_path: pathlib.Path) -> None:
    (tmp_path / "fw").mkdir()
    (tmp_path / "fw" / "hypervisor-fw").write_bytes(b"fw")
    plan = translate(body(), layout(tmp_path))
    execute(plan)
    image = tmp_path / "ephemeral" / "empty-disks" / "scratch.img"
    with open(image, "r+b") as f:
        f.write(b"written by the guest")
    execute(plan)
    assert image.read_bytes()[:20] == b"written by the guest"


def test_a_list_of_steps_runs_too(tmp_path: pathlib.Path) -> None:
    execute([CreateSparseImage(field="f", path=str(tmp_path / "a.img"), size=4096)])
    assert (tmp_path / "a.img").stat().st_size == 4096


@dataclass(frozen=True)
class Unknown(Step):
    pass


def test_an_unknown_step_is_a_preparation_error_not_a_crash() -> None:
    with pytest.raises(PreparationError, match="unknown preparation step Unknown"):
        execute([Unknown(field="f")])


def test_an_io_error_becomes_a_preparation_error_naming_the_field(tmp_path: pathlib.Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    step = CreateSparseImage(field="spec.volumes[3].emptyDisk", path=str(blocker / "sub" / "x.img"), size=4096)
    with pytest.raises(PreparationError) as e:
        execute([RequireFile(field="ok", path=str(blocker), what="a file"), step])
    assert e.value.field == "spec.volumes[3].emptyDisk" and str(blocker) in e.value.message

"""ISO images read back by two independent readers: pycdlib, and xorriso (what KubeVirt itself
makes them with): labels, layouts, Rock Ridge and Joliet names, Secret-mounted data, atomic
rebuilds, and the writer's own edges (long names, clashing ISO 9660 names, deep trees, many files)."""

from __future__ import annotations

import io
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pycdlib
import pytest

from ch_launcher.convert.plan import BuildCloudInitIso, BuildIso, IsoFile
from ch_launcher.prepare import PreparationError
from ch_launcher.prepare.iso import build_cloud_init_iso, build_iso, write_iso

FIELD = "spec.volumes[0].cloudInitNoCloud"


def read_iso(path: str) -> tuple[str, dict[str, bytes]]:
    """(volume label, {rock ridge path: content}) of an ISO."""
    iso = pycdlib.PyCdlib()
    iso.open(path)
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        files: dict[str, bytes] = {}
        for dirname, _, names in iso.walk(rr_path="/"):
            for name in names:
                rr = f"{dirname.rstrip('/')}/{name}"
                out = io.BytesIO()
                iso.get_file_from_iso_fp(out, rr_path=rr)
                files[rr] = out.getvalue()
        return label, files
    finally:
        iso.close()


def joliet_names(path: str) -> set[str]:
    """The files of the Joliet tree; none without one."""
    iso = pycdlib.PyCdlib()
    iso.open(path)
    try:
        if not iso.has_joliet():
            return set()
        return {f"{d.rstrip('/')}/{n}" for d, _, names in iso.walk(joliet_path="/") for n in names}
    finally:
        iso.close()


def nocloud(tmp_path: pathlib.Path, **kw: object) -> BuildCloudInitIso:
    defaults: dict[str, object] = {"field": FIELD, "path": str(tmp_path / "ci" / "noCloud.iso"),
                                   "data_source": "noCloud",
                                       "meta_data": (("instance-id", "abc"), ("local-hostname", "vm1"))}
    return BuildCloudInitIso(**{**defaults, **kw})  # type: ignore[arg-type]


def test_a_nocloud_iso_has_label_cidata_and_the_three_files(tmp_path: pathlib.Path) -> None:
    user = b"#cloud-config\npassword: fedora\n\xe2\x9c\x93\n"
    step = nocloud(tmp_path, user_data=user, network_data=b"version: 2\n")
    build_cloud_init_iso(step)
    label, files = read_iso(step.path)
    assert label == "cidata"
    assert files["/user-data"] == user
    assert json.loads(files["/meta-data"]) == {"instance-id": "abc", "local-hostname": "vm1"}
    assert files["/network-config"] == b"version: 2\n"
    assert joliet_names(step.path) == {"/user-data", "/meta-data", "/network-config"}


def test_a_nocloud_iso_without_network_data_has_no_network_file(tmp_path: pathlib.Path) -> None:
    step = nocloud(tmp_path, user_data=b"x")
    build_cloud_init_iso(step)
    assert sorted(read_iso(step.path)[1]) == ["/meta-data", "/user-data"]


def test_a_config_drive_iso_has_label_config_2_and_the_openstack_layout(tmp_path: pathlib.Path) -> None:
    step = BuildCloudInitIso(field="spec.volumes[0].cloudInitConfigDrive", path=str(tmp_path / "configdrive.iso"),
                             data_source="configDrive", meta_data=(("instance_id", "vm1.default"), ("uuid", "u")),
                             user_data=b"#!/bin/sh\n", network_data=b"{}")
    build_cloud_init_iso(step)
    label, files = read_iso(step.path)
    assert label == "config-2"
    assert files == {"/openstack/latest/user_data": b"#!/bin/sh\n",
                     "/openstack/latest/meta_data.json": b'{"instance_id":"vm1.default","uuid":"u"}',
                     "/openstack/latest/network_data.json": b"{}"}


def test_user_data_from_a_secret_is_read_from_the_first_file_found(tmp_path: pathlib.Path) -> None:
    secret = tmp_path / "secret" / "ci"
    secret.mkdir(parents=True)
    (secret / "userData").write_bytes(b"from the secret")
    step = nocloud(tmp_path, user_data_sources=(str(secret / "userdata"), str(secret / "userData")))
    build_cloud_init_iso(step)
    assert read_iso(step.path)[1]["/user-data"] == b"from the secret"


def test_a_missing_secret_is_an_error_that_says_where_it_looked(tmp_path: pathlib.Path) -> None:
    step = nocloud(tmp_path, user_data_sources=("/nowhere/userdata",))
    with pytest.raises(PreparationError) as e:
        build_cloud_init_iso(step)
    assert e.value.field == FIELD and "/nowhere/userdata" in e.value.message


def test_ssh_keys_of_access_credentials_go_into_the_metadata_in_order(tmp_path: pathlib.Path) -> None:
    keys = tmp_path / "keys-access-cred"
    keys.mkdir()
    (keys / "a").write_text("ssh-ed25519 AAAA a@x")
    (keys / "b").write_text("ssh-rsa BBBB b@x")
    (keys / "empty").write_text("")
    (keys / "..data").mkdir()  # the atomic writer's directory is not a key
    step = nocloud(tmp_path, user_data=b"x", ssh_key_dirs=(str(keys),))
    build_cloud_init_iso(step)
    meta = json.loads(read_iso(step.path)[1]["/meta-data"])
    assert meta["public-keys"] == {"0": "ssh-ed25519 AAAA a@x", "1": "ssh-rsa BBBB b@x"}


def test_a_rebuild_replaces_the_iso_whole_and_leaves_no_staging_file(tmp_path: pathlib.Path) -> None:
    step = nocloud(tmp_path, user_data=b"first")
    build_cloud_init_iso(step)
    with open(step.path, "rb") as held:  # a running VM keeps its open image
        build_cloud_init_iso(nocloud(tmp_path, user_data=b"second"))
        assert b"first" in held.read()
    assert read_iso(step.path)[1]["/user-data"] == b"second"
    assert os.listdir(tmp_path / "ci") == ["noCloud.iso"]


def kube_mount(root: pathlib.Path) -> pathlib.Path:
    """A directory as kubelet mounts a ConfigMap: keys are symlinks through ..data."""
    root.mkdir(parents=True)
    stamp = root / "..2026_11_29_00_00_00.000000001"
    (stamp / "nested").mkdir(parents=True)
    (stamp / "app.properties").write_text("a=1\n")
    (stamp / "nested" / "deep.txt").write_text("deep\n")
    os.symlink(stamp.name, root / "..data")
    os.symlink("..data/app.properties", root / "app.properties")
    os.symlink("..data/nested", root / "nested")
    return root


def test_a_config_map_iso_holds_its_keys_through_the_symlinks_and_nothing_else(tmp_path: pathlib.Path) -> None:
    source = kube_mount(tmp_path / "config-map" / "cm")
    step = BuildIso(field="spec.volumes[2].configMap", path=str(tmp_path / "config-map-disks" / "cm.iso"),
                    volume_label="cfgdata", files=(), source_dir=str(source))
    build_iso(step)
    label, files = read_iso(step.path)
    assert label == "cfgdata"
    assert files == {"/app.properties": b"a=1\n", "/nested/deep.txt": b"deep\n"}


def test_a_missing_config_volume_directory_is_an_error(tmp_path: pathlib.Path) -> None:
    step = BuildIso(field="spec.volumes[2].secret", path=str(tmp_path / "s.iso"), volume_label="cfgdata", files=(),
                    source_dir=str(tmp_path / "absent"))
    with pytest.raises(PreparationError, match=r"spec\.volumes\[2\]\.secret: the mounted volume directory"):
        build_iso(step)


def test_listed_files_are_added_and_missing_optional_ones_skipped(tmp_path: pathlib.Path) -> None:
    (tmp_path / "src").write_bytes(b"from disk")
    step = BuildIso(field="f", path=str(tmp_path / "x.iso"), volume_label="LBL", files=(
        IsoFile(name="inline.txt", data=b"inline"), IsoFile(name="disk.txt", source=str(tmp_path / "src")),
        IsoFile(name="gone.txt", source=str(tmp_path / "gone"), optional=True)))
    build_iso(step)
    assert read_iso(step.path)[1] == {"/inline.txt": b"inline", "/disk.txt": b"from disk"}


def test_long_names_keep_their_rock_ridge_name_without_joliet(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "cm"
    source.mkdir()
    name = "k" * 100
    (source / name).write_bytes(b"v")
    step = BuildIso(field="f", path=str(tmp_path / "x.iso"), volume_label="cfgdata", files=(), source_dir=str(source))
    build_iso(step)
    assert read_iso(step.path)[1] == {f"/{name}": b"v"}


def test_a_label_too_long_for_joliet_keeps_all_32_characters_without_joliet(tmp_path: pathlib.Path) -> None:
    label = "L" * 32
    step = BuildIso(field="f", path=str(tmp_path / "x.iso"), volume_label=label, files=(IsoFile(name="a", data=b"v"),))
    build_iso(step)
    assert read_iso(step.path) == (label, {"/a": b"v"})


def test_an_iso_the_writer_cannot_write_is_a_preparation_error_with_the_writers_reason(tmp_path: pathlib.Path) -> None:
    (tmp_path / "ci").write_text("a file where the ISO's directory should be")
    with pytest.raises(PreparationError) as e:
        build_cloud_init_iso(nocloud(tmp_path, user_data=b"#cloud-config\n"))
    assert e.value.field == FIELD
    assert "cannot build the cloud-init ISO" in e.value.message and "File exists" in e.value.message


def test_building_an_iso_loads_nothing_but_the_standard_library_and_starts_no_process(tmp_path: pathlib.Path) -> None:
    """The image is written in the launcher's own process in about a millisecond (no pycdlib,
    no child: that cost 100-600 ms of the first Sync)."""
    path = tmp_path / "x.iso"
    code = ("import subprocess, sys\nsubprocess.Popen = None\nfrom ch_launcher.prepare.iso import write_iso\n"
            "before = set(sys.modules)\n"
            f"write_iso({str(path)!r}, 'cidata', [('meta-data', b'{{}}')])\n"
            "print(sorted(m for m in set(sys.modules) - before if m.split('.')[0] not in sys.stdlib_module_names))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert read_iso(str(path)) == ("cidata", {"/meta-data": b"{}"})


XORRISO = shutil.which("xorriso")


def xorriso_view(path: str, *, rock_ridge: bool = True) -> dict[str, tuple[str, bytes | None]]:
    """{path: (mode as `ls -l` shows it, content or None for a directory)} as xorriso reads the
    image: through Rock Ridge, or (`rock_ridge=False`) through Joliet."""
    if XORRISO is None:
        pytest.fail("xorriso is missing (Makefile TEST_TOOLS)")
    flags = [] if rock_ridge else ["-rockridge", "off", "-joliet", "on"]
    listing = subprocess.run([XORRISO, *flags, "-indev", path, "-find", "/", "-exec", "lsdl", "--"],
                             capture_output=True, text=True, timeout=60, check=True).stdout
    out: dict[str, tuple[str, bytes | None]] = {}
    extract = pathlib.Path(path + ".extracted")
    subprocess.run([XORRISO, *flags, "-osirrox", "on", "-indev", path, "-extract", "/", str(extract)],
                   capture_output=True, timeout=60, check=True)
    for line in listing.splitlines():
        mode, name = line.split()[0], line.split("'")[1]
        if name != "/":
            out[name] = (mode, None if mode.startswith("d") else (extract / name.lstrip("/")).read_bytes())
    return out


def test_xorriso_reads_the_rock_ridge_and_the_joliet_trees_alike(tmp_path: pathlib.Path) -> None:
    step = BuildCloudInitIso(field="spec.volumes[0].cloudInitConfigDrive", path=str(tmp_path / "configdrive.iso"),
                             data_source="configDrive", meta_data=(("uuid", "u"),), user_data=b"#!/bin/sh\n",
                             network_data=b"{}")
    build_cloud_init_iso(step)
    expected = {"/openstack": ("dr-xr-xr-x", None), "/openstack/latest": ("dr-xr-xr-x", None),
                "/openstack/latest/user_data": ("-r--r--r--", b"#!/bin/sh\n"),
                "/openstack/latest/meta_data.json": ("-r--r--r--", b'{"uuid":"u"}'),
                "/openstack/latest/network_data.json": ("-r--r--r--", b"{}")}
    assert xorriso_view(step.path) == expected
    assert {k: v[1] for k, v in xorriso_view(step.path, rock_ridge=False).items()} == {
        k: v[1] for k, v in expected.items()}


def test_names_iso_9660_cannot_hold_keep_their_own_names_through_rock_ridge(tmp_path: pathlib.Path) -> None:
    """Kubernetes keys may be 253 characters of any case, and differ only where ISO 9660's
    upper-case `A-Z0-9_` names cannot tell them apart; a tree may be deep and wide."""
    files = {"a" * 253: b"1", "A" * 253: b"2", "x.y.z": b"3", "x_y.z": b"4", "..dot": b"5", "dir/sub/deep/f": b"6"}
    files.update({f"many/key-{n:03}": str(n).encode() for n in range(150)})  # directories of several sectors
    path = str(tmp_path / "cfg.iso")
    write_iso(path, "cfgdata", files.items())
    assert read_iso(path) == ("cfgdata", {f"/{k}": v for k, v in files.items()})
    extracted = {k: v[1] for k, v in xorriso_view(path).items() if v[1] is not None}
    assert extracted == {f"/{k}": v for k, v in files.items()}
    assert joliet_names(path) == set()  # 253 characters: too long for Joliet, which is left out


def test_a_label_too_long_for_joliet_keeps_rock_ridge_and_its_iso_9660_label(tmp_path: pathlib.Path) -> None:
    path = str(tmp_path / "label.iso")
    write_iso(path, "a-label-of-twenty-chars", [("k", b"v")])
    assert read_iso(path) == ("a-label-of-twenty-chars", {"/k": b"v"})
    assert joliet_names(path) == set()


@pytest.mark.parametrize("bad", ["", "/abs", "a//b", "a/"])
def test_a_path_the_image_cannot_hold_is_a_value_error(tmp_path: pathlib.Path, bad: str) -> None:
    with pytest.raises(ValueError, match="not a relative file path"):
        write_iso(str(tmp_path / "x.iso"), "l", [(bad, b"")])


ISOINFO = shutil.which("isoinfo")


def isoinfo(path: str, *args: str) -> bytes:
    """What genisoimage's `isoinfo` (a third reader, independent of libisofs and pycdlib) prints."""
    if ISOINFO is None:
        pytest.fail("isoinfo is missing (Makefile TEST_TOOLS: genisoimage)")
    return subprocess.run([ISOINFO, "-i", path, *args], capture_output=True, timeout=60, check=True).stdout


def test_blkid_finds_the_label_cloud_init_looks_for_and_isoinfo_reads_every_tree(tmp_path: pathlib.Path) -> None:
    """cloud-init finds its NoCloud data by the filesystem label as blkid reads it (`cidata`);
    a file of many sectors reads back whole through the Rock Ridge, Joliet and ISO 9660 names."""
    user = b"#cloud-config\n" + os.urandom(3 << 20)
    step = nocloud(tmp_path, user_data=user, network_data=b"version: 2\n")
    build_cloud_init_iso(step)
    probe = subprocess.run(["blkid", "-p", "-o", "export", step.path], capture_output=True, text=True, timeout=60,
                           check=True).stdout.splitlines()
    assert {"TYPE=iso9660", "LABEL=cidata", "USAGE=filesystem"} <= set(probe), probe
    described = isoinfo(step.path, "-d").decode()
    assert "Volume id: cidata" in described and "Rock Ridge signatures version 1 found" in described
    assert "Joliet with UCS level 3 found" in described
    for tree in ("-R", "-J"):  # the Rock Ridge and the Joliet names
        listing = isoinfo(step.path, tree, "-l").decode()
        assert {line.split()[-1] for line in listing.splitlines() if line.startswith("-")} == {
            "meta-data", "network-config", "user-data"}, listing
        assert isoinfo(step.path, tree, "-x", "/user-data") == user
    assert isoinfo(step.path, "-f").decode().split() == ["/META_DATA.;1", "/NETWORK_CONFIG.;1", "/USER_DATA.;1"]
    assert isoinfo(step.path, "-x", "/USER_DATA.;1") == user


def test_busyboxs_findfs_and_blkid_find_a_small_nocloud_iso_by_its_label(tmp_path: pathlib.Path) -> None:
    """A guest without util-linux (a busybox initramfs, CirrOS) finds its cloud-init disk with
    busybox's volume probe, which reads the first 0x11000 bytes of the device and recognises
    nothing on a shorter one: a NoCloud ISO of two small files (28 sectors before the padding)
    carries mkisofs's 150 padding sectors in its volume, as xorrisofs's does (found with the Linux
    guest of tests/cluster/test_linux_guest.py, whose `findfs LABEL=cidata` came back empty)."""
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.fail("busybox is missing (Makefile TEST_TOOLS: busybox)")
    step = nocloud(tmp_path, user_data=b"#cloud-config\nhostname: penguin\n")
    build_cloud_init_iso(step)
    assert os.path.getsize(step.path) >= 0x11000
    probe = subprocess.run([busybox, "blkid", step.path], capture_output=True, text=True, timeout=60, check=True)
    assert 'LABEL="cidata" TYPE="iso9660"' in probe.stdout, probe
    assert read_iso(step.path)[0] == "cidata"

"""The Containerfile cannot be built here (no container engine); what can be checked, is:
targets, every path it copies, the commands it runs and installs, the pinned downloads, and that
the images it builds are the ones the manifests and the configuration refer to."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from admission.config import EXAMPLE, load_config
from ch_launcher import cli as launcher_cli
from ch_launcher.convert.firmware import BIOS_FIRMWARE, EFI_FIRMWARE
from tests.manifests.containerfile import copy_sources, parse
from tests.manifests.render import REPO, one

CONTAINERFILE = parse((REPO / "Containerfile").read_text())
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = PYPROJECT["project"]["scripts"]
VERSION = PYPROJECT["project"]["version"]
# Programs ch-launcher might run, and the Debian package that provides each (the Makefile's
# TEST_TOOLS uses the same packages for the tests).
TOOL_PACKAGES = {"dnsmasq": "dnsmasq-base", "qemu-img": "qemu-utils", "busybox": "busybox", "udhcpc": "busybox",
                 "ip": "iproute2", "virtiofsd": "virtiofsd", "nft": "nftables", "iptables": "iptables",
                 "swtpm": "swtpm"}
# The firmware files the launcher looks for in --firmware-dir.
FIRMWARE_FILES = (BIOS_FIRMWARE, EFI_FIRMWARE)


def built_images() -> dict[str, str]:
    """target -> image tag, from the build commands in the Containerfile's header."""
    found = re.findall(r"--target\s+(\S+)\s+-t\s+(\S+)", CONTAINERFILE.header)
    return dict(found)


def test_there_is_a_launcher_and_an_admission_target():
    assert {"launcher", "admission"} <= set(CONTAINERFILE.stages)
    assert set(built_images()) == {"launcher", "admission"}


def test_every_copied_path_exists_in_the_repository_or_an_earlier_stage():
    seen = []
    for stage in CONTAINERFILE.stages.values():
        for rest in stage.all("COPY"):
            sources, _dest, from_stage = copy_sources(rest)
            if from_stage:
                assert from_stage in seen, f"{stage.name}: COPY --from={from_stage} before that stage"
                continue
            for src in sources:
                assert (REPO / src).exists(), f"{stage.name}: COPY {src}: not in the repository"
        seen.append(stage.name)


def venv_stage(target: str):
    """The stage whose virtualenv the target copies in (COPY --from=STAGE /opt/kubevirt-ch)."""
    (source,) = [from_stage for rest in CONTAINERFILE.stage(target).all("COPY")
                 for sources, dest, from_stage in [copy_sources(rest)]
                 if from_stage and sources == ["/opt/kubevirt-ch"] and dest == "/opt/kubevirt-ch"]
    return CONTAINERFILE.stage(source)


def test_the_package_is_built_from_everything_it_needs():
    """pip builds the wheel from pyproject.toml, the README it names, and the packages it finds."""
    for target in ("launcher", "admission"):
        build = venv_stage(target)
        copied = {src.rstrip("/") for stage in (build, CONTAINERFILE.stages.get(build.base)) if stage
                  for rest in stage.all("COPY") for src in copy_sources(rest)[0]}
        assert {"pyproject.toml", PYPROJECT["project"]["readme"]} <= copied, target
        packages = PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]
        assert {p.rstrip("*") for p in packages} <= copied, target


@pytest.mark.parametrize("target", ["launcher", "admission"])
def test_each_image_installs_only_the_extra_of_its_own_process(target):
    """`pip install '.[launcher]'` for the launcher image, `'.[admission]'` for the admission one:
    no image carries the other's dependencies (tests/unit/test_packaging.py checks the imports)."""
    assert target in PYPROJECT["project"]["optional-dependencies"], f"pyproject.toml has no extra {target!r}"
    installs = re.findall(r"/opt/kubevirt-ch/bin/pip install [^&]*?'\.\[([\w,]+)\]'", venv_stage(target).run_text())
    assert installs == [target]
    assert "python -m venv /opt/kubevirt-ch" in venv_stage(target).run_text()


@pytest.mark.parametrize("target,script", [("launcher", "ch-launcher"), ("admission", "ch-admission")])
def test_each_image_runs_its_console_script_from_usr_bin(target, script):
    assert script in SCRIPTS, f"pyproject.toml has no console script {script}"
    stage = CONTAINERFILE.stage(target)
    assert f"ln -s /opt/kubevirt-ch/bin/{script} /usr/bin/{script}" in stage.run_text()
    assert stage.exec_form("ENTRYPOINT") == [f"/usr/bin/{script}"]
    # the virtualenv that holds the script is copied in from a stage of the same base image
    assert stage.base == "python-runtime"
    assert CONTAINERFILE.stage("python-runtime").base == CONTAINERFILE.stage(venv_stage(target).base).base


def test_the_launcher_image_and_command_are_the_ones_the_pod_mutator_configures(default_install):
    config = load_config(EXAMPLE)
    assert built_images()["launcher"] == config.launcher.image
    assert config.launcher.command == CONTAINERFILE.stage("launcher").exec_form("ENTRYPOINT")
    configmap = one(default_install, "ConfigMap", "ch-admission-config")
    assert yaml.safe_load(configmap["data"]["config.yaml"])["launcher"]["image"] == built_images()["launcher"]


def test_the_admission_image_and_command_are_the_ones_the_deployment_runs(default_install, cert_manager_install):
    for objects in (default_install, cert_manager_install):
        (c,) = one(objects, "Deployment", "ch-admission")["spec"]["template"]["spec"]["containers"]
        assert c["image"] == built_images()["admission"]
        assert c["command"] == CONTAINERFILE.stage("admission").exec_form("ENTRYPOINT")


def test_images_are_tagged_with_the_package_version():
    for image in built_images().values():
        assert image.startswith("ghcr.io/kubevirt-ch/")
        assert image.endswith(f":v{VERSION}"), image


DOWNLOADS = [  # (version ARG, sha256 ARG, URL fragment, the file in the vmm-assets stage, where it lands in the image)
    ("CLOUD_HYPERVISOR_VERSION", "CLOUD_HYPERVISOR_SHA256",
     "cloud-hypervisor/cloud-hypervisor/releases/download/${CLOUD_HYPERVISOR_VERSION}/cloud-hypervisor-static",
     "cloud-hypervisor", "/usr/bin/cloud-hypervisor"),
    ("HYPERVISOR_FW_VERSION", "HYPERVISOR_FW_SHA256",
     "cloud-hypervisor/rust-hypervisor-firmware/releases/download/${HYPERVISOR_FW_VERSION}/hypervisor-fw",
     "hypervisor-fw", "/usr/share/cloud-hypervisor/hypervisor-fw"),
    ("EDK2_VERSION", "EDK2_SHA256",
     "cloud-hypervisor/edk2/releases/download/${EDK2_VERSION}/CLOUDHV.fd",
     "CLOUDHV.fd", "/usr/share/cloud-hypervisor/CLOUDHV.fd"),
]


@pytest.mark.parametrize("version_arg,sha_arg,url,name,dest", DOWNLOADS)
def test_every_download_is_pinned_by_version_and_checked_by_sha256(version_arg, sha_arg, url, name, dest):
    (stage,) = [s for s in CONTAINERFILE.stages.values() if version_arg in s.args]
    assert stage.args[version_arg], f"{version_arg} has no default"
    assert re.fullmatch(r"[0-9a-f]{64}", stage.args[sha_arg]), f"{sha_arg} is not a sha256"
    run = stage.run_text()
    # fetch FILE URL SHA: each download names its file, its URL and its checksum together
    m = re.search(r"fetch\s+/out/" + re.escape(name) + r"\s+\"https://github\.com/([^\"]+)\"\s+\"\$\{(\w+)\}\"", run)
    assert m, f"no fetch of {name}"
    assert m.group(1) == url and m.group(2) == sha_arg
    assert "sha256sum --check" in run


def launcher_vmm_files() -> dict[str, str]:
    """What the launcher stage copies from `vmm-assets`: file -> its path in the image."""
    out = {}
    for rest in CONTAINERFILE.stage("launcher").all("COPY"):
        sources, dest, from_stage = copy_sources(rest)
        if from_stage == "vmm-assets":
            for src in sources:
                out[src] = f"{dest.rstrip('/')}/{src}" if dest.endswith("/") else dest
    return out


def test_the_vmm_and_firmware_land_where_the_launcher_looks_for_them():
    """virt-controller never passes --ch-binary or --firmware-dir: the launcher's defaults must be
    where the image puts cloud-hypervisor and its firmware."""
    settings = launcher_cli.parse_args(["--name", "x", "--uid", "u", "--namespace", "default"], environ={})
    assert launcher_vmm_files() == {name: dest for *_rest, name, dest in DOWNLOADS}
    dests = set(launcher_vmm_files().values())
    assert settings.ch_binary in dests
    assert {f"{settings.firmware_dir}/{name}" for name in FIRMWARE_FILES} <= dests
    modes = {copy_sources(rest)[0][0]: re.search(r"--chmod=(\d+)", rest).group(1)
             for rest in CONTAINERFILE.stage("launcher").all("COPY") if "--from=vmm-assets" in rest}
    assert modes == {"cloud-hypervisor": "0755", "hypervisor-fw": "0644"}


def test_the_vmm_assets_stage_holds_only_the_downloaded_files():
    """`make images VMM_ASSETS=DIR` gives podman `--build-context vmm-assets=DIR`, which stands in for
    the stage of that name: the stage must hold what such a directory holds, the three files at its
    root and nothing else (a scratch stage of the download stage's /out/)."""
    stage = CONTAINERFILE.stage("vmm-assets")
    assert stage.base == "scratch"
    assert [copy_sources(rest) for rest in stage.all("COPY")] == [(["/out/"], "/", "vmm-download")]
    assert {ins for ins, _ in stage.instructions} == {"COPY"}


def test_the_launcher_image_installs_exactly_the_programs_the_launcher_runs():
    """A program the launcher runs is named as a string literal in its source ("dnsmasq",
    "/usr/sbin/dnsmasq"); its Debian package must be in the image, and nothing else."""
    source = "\n".join(p.read_text() for p in (REPO / "ch_launcher").rglob("*.py"))
    used = {tool for tool in TOOL_PACKAGES
            if re.search(r"""["'](?:/[\w/]*/)?""" + re.escape(tool) + r"""["']""", source)}
    installed = set()
    for run in CONTAINERFILE.stage("launcher").all("RUN"):
        for m in re.finditer(r"apt-get install -y --no-install-recommends ([^&]+)", run):
            installed |= set(m.group(1).split())
        for m in re.finditer(r"apt-get purge -y(?: --auto-remove)? ([^&]+)", run):
            installed -= set(m.group(1).split())  # build-time helpers, gone from the image
    assert installed == {TOOL_PACKAGES[t] for t in used}, (
        f"the launcher runs {sorted(used) or 'no external program'}; the launcher image installs {sorted(installed)}")


def test_the_packages_match_what_the_tests_install():
    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")
    pairs = dict(p.split(":") for p in re.search(r"TEST_TOOLS\s*:=\s*(.*)", makefile).group(1).split())
    assert pairs, "the Makefile's TEST_TOOLS lists no Debian packages"
    for tool, package in pairs.items():
        if tool in TOOL_PACKAGES:
            assert TOOL_PACKAGES[tool] == package, tool


def test_both_images_run_as_non_root(default_install):
    launcher_user = CONTAINERFILE.stage("launcher").all("USER")[-1]
    assert launcher_user == "107:107"  # virt-launcher's non-root uid/gid (contract.md §8)
    admission_user = CONTAINERFILE.stage("admission").all("USER")[-1]
    pod = one(default_install, "Deployment", "ch-admission")["spec"]["template"]["spec"]
    assert admission_user == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"


def test_the_launcher_can_bind_the_dhcp_port_as_uid_107():
    """The non-root launcher's DHCP server binds port 67: the interpreter that runs ch-launcher
    carries cap_net_bind_service as a file capability, as virt-launcher's binary does."""
    from ch_launcher.dhcp.server import SERVER_PORT
    assert SERVER_PORT < 1024
    run = CONTAINERFILE.stage("launcher").run_text()
    assert 'python="$(readlink -f /opt/kubevirt-ch/bin/python)"' in run
    assert 'setcap cap_net_bind_service=+ep "$python"' in run
    assert 'getcap "$python" | grep -q cap_net_bind_service' in run


def test_the_launcher_image_makes_var_run_a_relative_symlink_to_run():
    """KubeVirt's sockets live under /var/run; virt-handler reaches the migration proxy's through
    /proc/<pid>/root/var/run (test below), which only a relative link keeps inside the pod."""
    run = CONTAINERFILE.stage("launcher").run_text()
    assert 'ln -sfn ../run /var/run && [ "$(readlink /var/run)" = ../run ]' in run


@pytest.mark.skipif(os.geteuid() != 0, reason="chroot needs root; CI runs as root")
@pytest.mark.parametrize(("link", "stays_inside"), [("../run", True), ("/run", False)])
def test_a_path_through_proc_root_stays_in_the_pod_only_when_var_run_is_relative(tmp_path, link, stays_inside):
    """What virt-handler does for a migration (kubevirt pkg/virt-handler/migration-source.go and
    migration-target.go@d923fdb815cd: `fmt.Sprintf(filepath.Join(virtLauncherFSRunDirPattern,
    "kubevirt"), res.Pid())` with the pattern "/proc/%d/root/var/run"): the kernel follows
    /proc/<pid>/root into the process's root, but resolves an absolute symlink met there against
    the root of the process walking the path. Found on the two-node cluster: with Debian's
    /var/run -> /run, virt-handler created the source proxy's sockets in the node's /run."""
    root = tmp_path / "pod"
    (root / "run" / "kubevirt").mkdir(parents=True)
    (root / "var").mkdir()
    (root / "var" / "run").symlink_to(link)
    enter = "import os, sys; os.chroot(sys.argv[1]); os.chdir('/'); print('in', flush=True); sys.stdin.read()"
    chrooted = subprocess.Popen([sys.executable, "-c", enter, str(root)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert chrooted.stdout is not None and chrooted.stdout.readline() == "in\n"
        seen = f"/proc/{chrooted.pid}/root/var/run/kubevirt"
        inside = (root / "run" / "kubevirt").stat()
        try:
            found = os.stat(seen)
        except FileNotFoundError:
            found = None
        assert (found is not None and (found.st_dev, found.st_ino) == (inside.st_dev, inside.st_ino)) == stays_inside
    finally:
        chrooted.communicate("", timeout=10)


def test_the_launcher_image_runs_optimized_with_its_bytecode_compiled():
    """The launcher's memory knobs (bench/footprint.py measures this configuration): -OO and two
    malloc arenas, and bytecode for that optimization level compiled at build time for the
    standard library (the base image deletes its .pyc files) and the virtualenv, since
    PYTHONDONTWRITEBYTECODE keeps the interpreter from caching what it compiles."""
    launcher = CONTAINERFILE.stage("launcher")
    env = dict(word.split("=", 1) for rest in launcher.all("ENV") for word in rest.split())
    assert env["PYTHONOPTIMIZE"] == "2" and env["MALLOC_ARENA_MAX"] == "2"
    assert "PYTHONDONTWRITEBYTECODE=1" in CONTAINERFILE.stage("python-runtime").all("ENV")[0]
    run = launcher.run_text()
    m = re.search(r"python -m compileall -q -j0 -o (\d) (.*?) /opt/kubevirt-ch/lib", run)
    assert m and m.group(1) == env["PYTHONOPTIMIZE"], run
    assert 'sysconfig.get_path("stdlib")' in m.group(2)
    assert CONTAINERFILE.stage("admission").all("ENV") == [], "the admission image keeps the default interpreter"


def test_the_footprint_benchmark_runs_the_launcher_in_the_images_environment():
    import importlib.util

    spec = importlib.util.spec_from_file_location("footprint", REPO / "bench" / "footprint.py")
    footprint = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(footprint)
    env = footprint.image_environment()
    for stage in ("python-runtime", "launcher"):
        for rest in CONTAINERFILE.stage(stage).all("ENV"):
            for word in rest.split():
                key, value = word.split("=", 1)
                assert env[key] == value


def test_make_images_builds_both_targets_with_their_tags_and_writes_oci_archives(tmp_path):
    """`make images` (dry run): each target built with the tag of the Containerfile's header, the
    offline inputs passed as the Containerfile expects them, each image saved as an OCI archive."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    ca = tmp_path / "ca.crt"
    ca.write_text("")
    out = subprocess.run(["make", "--no-print-directory", "-n", "-C", str(REPO), "images", "PODMAN=podman",
                          "PYTHON_IMAGE=localhost/base:1", f"VMM_ASSETS={tmp_path}", f"BUILD_CA={ca}",
                          f"IMAGES_DIR={tmp_path}/out"], capture_output=True, text=True, check=True).stdout
    builds = re.findall(r"^podman build --target (\S+) -t (\S+) (.*) -f Containerfile \.$", out, re.MULTILINE)
    assert [(target, tag) for target, tag, _ in builds] == sorted(built_images().items(), reverse=True)
    for _target, _tag, args in builds:
        assert args.split() == ["--build-arg", "PYTHON_IMAGE=localhost/base:1", "--build-context",
                                f"vmm-assets={tmp_path}", "--secret", f"id=build-ca,src={ca}"]
    saves = re.findall(r"^podman save --format oci-archive -o (\S+) (\S+)$", out, re.MULTILINE)
    assert saves == [(f"{tmp_path}/out/{image.split('/')[-1].split(':')[0]}.oci.tar", image)
                     for image in sorted(built_images().values(), reverse=True)]
    # the secret is what the venv stages mount for pip, and nothing else does
    for stage in CONTAINERFILE.stages.values():
        mounts = re.findall(r"--mount=type=secret,id=build-ca,target=(\S+)", stage.run_text())
        assert mounts == (["/run/secrets/build-ca.crt"] if stage.name.endswith("-venv") else []), stage.name

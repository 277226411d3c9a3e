"""ch-launcher's command line: every virt-launcher flag with KubeVirt's default, plus ours."""

from __future__ import annotations

import pytest

from ch_launcher.cli import Settings, parse_args, parse_duration
from tests.polling import until


def test_defaults_are_virt_launchers():
    s = parse_args([], environ={})
    assert s.qemu_timeout == 180.0
    assert s.share_dir == "/var/run/kubevirt"
    assert s.ephemeral_disk_dir == "/var/run/kubevirt-ephemeral-disks"
    assert s.container_disk_dir == "/var/run/kubevirt/container-disks"
    assert s.hotplug_disk_dir == "/var/run/kubevirt/hotplug-disks/"
    assert s.grace_period_seconds == 30
    assert s.hook_sidecars == 0
    assert s.ovmf_path == "/usr/share/edk2/ovmf"
    assert s.disk_memory_limit == 2097152000
    assert s.hypervisor == "kvm"
    assert s.verbosity == 2
    assert s.accepted["run-as-nonroot"] is False
    assert s.accepted["qemu-agent-user-interval"] == 10.0


def test_our_own_flags_have_their_documented_defaults(monkeypatch):
    monkeypatch.delenv("CH_BINARY", raising=False)
    s = parse_args([], environ={})
    assert (s.ch_binary, s.private_dir, s.firmware_dir) == (
        "/usr/bin/cloud-hypervisor", "/var/run/kubevirt-private", "/usr/share/cloud-hypervisor")


def test_ch_binary_comes_from_the_environment_unless_the_flag_says_otherwise(monkeypatch):
    monkeypatch.setenv("CH_BINARY", "/opt/ch/cloud-hypervisor")
    assert parse_args([]).ch_binary == "/opt/ch/cloud-hypervisor"
    assert parse_args(["--ch-binary", "/x/ch"]).ch_binary == "/x/ch"


def test_the_command_line_virt_controller_renders_is_accepted():
    argv = ["--qemu-timeout", "287s", "--name", "testvmi", "--uid", "1234", "--namespace", "default",
            "--kubevirt-share-dir", "/var/run/kubevirt", "--ephemeral-disk-dir", "/var/run/kubevirt-ephemeral-disks",
            "--container-disk-dir", "/var/run/kubevirt/container-disks", "--grace-period-seconds", "45",
            "--hook-sidecars", "0", "--ovmf-path", "/usr/share/OVMF", "--disk-memory-limit", "2097152000",
            "--hypervisor", "kvm", "--run-as-nonroot", "--image-volume", "--vm-stats-collector=false",
            "--allow-emulation", "--libvirt-log-filters", "1:qemu", "--keep-after-failure"]
    s = parse_args(argv, environ={})
    assert (s.qemu_timeout, s.name, s.uid, s.namespace, s.grace_period_seconds) \
        == (287.0, "testvmi", "1234", "default", 45)
    assert s.accepted["run-as-nonroot"] is True and s.accepted["vm-stats-collector"] is False
    assert s.ignored == []


def test_unknown_flags_are_kept_for_the_log_not_refused():
    s = parse_args(["--name", "a", "--some-future-flag", "x", "--another=1"], environ={})
    assert s.name == "a"
    assert s.ignored == ["--some-future-flag", "x", "--another=1"]


def test_verbosity_comes_from_the_flag_or_kubevirts_environment_variable():
    assert parse_args(["-v", "4"], environ={}).verbosity == 4
    assert parse_args([], environ={"VIRT_LAUNCHER_LOG_VERBOSITY": "6"}).verbosity == 6
    assert parse_args([], environ={"VIRT_LAUNCHER_LOG_VERBOSITY": "loud"}).verbosity == 2


@pytest.mark.parametrize("text,seconds", [("3m", 180), ("240s", 240), ("1h2m3.5s", 3723.5), ("300ms", 0.3),
                                          ("0", 0), ("1.5h", 5400), ("90us", 90e-6)])
def test_go_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "3", "m", "3x", "1h-2m", "s3"])
def test_bad_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_a_bad_qemu_timeout_exits_with_argparses_message(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["--qemu-timeout", "soon"], environ={})
    assert e.value.code == 2
    assert "invalid duration 'soon'" in capsys.readouterr().err


def test_socket_paths_derive_from_the_share_dir():
    s = Settings(share_dir="/tmp/x")
    assert s.sockets_dir == "/tmp/x/sockets"
    assert s.notify_socket == "/tmp/x/domain-notify-pipe.sock"


def test_simulate_crash_exits_non_zero_at_once():
    from ch_launcher.cli import main

    assert main(["--simulate-crash"]) != 0


def test_the_process_tree_of_virt_handlers_runtime_is_asked_for_by_a_flag():
    assert parse_args([]).kubevirt_runtime_processes is False
    assert parse_args(["--kubevirt-runtime-processes"]).kubevirt_runtime_processes is True
    assert parse_args(["--kubevirt-runtime-processes=false"]).kubevirt_runtime_processes is False


class _FakeManager:
    """Just enough of DomainManager for supervise(): a running VM that Kill stops."""

    def __init__(self):
        import asyncio

        from ch_launcher.lifecycle import VmState

        self.state = VmState.RUNNING
        self.booted_once = asyncio.Event()
        self.booted_once.set()
        self.forgotten = asyncio.Event()
        self.changed = asyncio.Event()
        self.waits = 0
        self.marked = 0
        self.commands = []

    async def wait_until(self, predicate, timeout=None):
        import asyncio

        self.waits += 1
        while not predicate():
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), timeout)
            except TimeoutError:
                return predicate()
        return True

    async def mark_for_graceful_shutdown(self):
        self.marked += 1

    async def execute(self, intent, vmi, options=None, *, budget=18.0):
        from ch_launcher.lifecycle import Intent, VmState

        self.commands.append(intent)
        if intent is Intent.KILL:
            self.state = VmState.DOWN
            self.changed.set()
        return "done"

    async def flush_events(self, timeout):
        return True


def test_after_sigterm_the_launcher_waits_for_the_vm_without_spinning():
    import asyncio

    from ch_launcher.cli import Settings, supervise
    from ch_launcher.lifecycle import Intent

    manager = _FakeManager()

    async def story():
        stop, early = asyncio.Event(), asyncio.Event()
        task = asyncio.ensure_future(supervise(manager, Settings(grace_period_seconds=1), stop, early))
        await until(lambda: manager.waits, 10, 0)  # until it watches the VM
        stop.set()  # SIGTERM
        await asyncio.sleep(0.5)  # inside the grace period: nothing to do but wait
        assert manager.marked == 1 and manager.commands == []
        assert manager.waits <= 3, f"the supervisor looped {manager.waits} times while waiting"
        await until(lambda: manager.commands, 10, 0.05)  # the grace period expires: the launcher kills the VM itself
        assert manager.commands == [Intent.KILL]
        manager.forgotten.set()  # virt-handler's Delete
        manager.changed.set()
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(story()) == 0

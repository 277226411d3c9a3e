"""VmmProcess with stand-in binaries: command line, stale sockets, failures before any API."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from ch_launcher.ch.process import VmmProcess, VmmStartError


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "vmm"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def _spawn(tmp_path, binary: str, **kw) -> VmmProcess:
    return VmmProcess.spawn(
        binary, api_socket=str(tmp_path / "api.sock"), event_monitor=str(tmp_path / "ev"),
        log_file=str(tmp_path / "vmm.log"), **kw,
    )  # fmt: skip


def test_command_line_is_cloud_hypervisors(tmp_path) -> None:
    binary = _script(tmp_path, 'echo "$@" > "$(dirname "$0")/argv"')
    proc = _spawn(tmp_path, binary, no_shutdown=True, extra_args=("--seccomp", "log"))
    try:
        assert proc.wait(10) == 0
    finally:
        proc.close()
    argv = (tmp_path / "argv").read_text().split()
    assert argv == [
        "--api-socket", f"path={tmp_path}/api.sock", "--event-monitor", f"path={tmp_path}/ev",
        "--log-file", f"{tmp_path}/vmm.log", "-v", "--no-shutdown", "--seccomp", "log",
    ]  # fmt: skip


def test_env_none_inherits_and_env_given_replaces(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KC_PROBE", "inherited")
    binary = _script(tmp_path, 'echo "${KC_PROBE:-unset}" >> "$(dirname "$0")/env"')
    for env in (None, {"PATH": os.environ["PATH"]}):
        proc = _spawn(tmp_path, binary, env=env)
        proc.wait(10)
        proc.close()
    assert (tmp_path / "env").read_text().split() == ["inherited", "unset"]


def test_stale_socket_is_unlinked_before_the_start(tmp_path) -> None:
    stale = tmp_path / "api.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    proc = _spawn(tmp_path, _script(tmp_path, "exit 0"))
    proc.wait(10)
    proc.close()
    assert not stale.exists()


def test_a_directory_at_the_socket_path_is_refused(tmp_path) -> None:
    (tmp_path / "api.sock").mkdir()
    with pytest.raises(VmmStartError, match="is a directory"):
        _spawn(tmp_path, _script(tmp_path, "exit 0"))


def test_an_unwritable_log_file_is_a_start_error_naming_it(tmp_path) -> None:
    with pytest.raises(VmmStartError, match=r"cannot open the VMM log file .*/no-dir/vmm.log"):
        VmmProcess.spawn(
            _script(tmp_path, "exit 0"), api_socket=str(tmp_path / "api.sock"), event_monitor=str(tmp_path / "ev"),
            log_file=str(tmp_path / "no-dir" / "vmm.log"),
        )  # fmt: skip


def test_a_missing_binary_is_a_start_error(tmp_path) -> None:
    with pytest.raises(VmmStartError, match="cannot execute"):
        _spawn(tmp_path, str(tmp_path / "no-such-vmm"))


def test_startup_error_includes_what_the_vmm_printed(tmp_path) -> None:
    proc = _spawn(tmp_path, _script(tmp_path, "echo 'Error booting VMM: bad flag' >&2; exit 1"))
    try:
        with pytest.raises(VmmStartError) as info:
            proc.wait_ready(5)
    finally:
        proc.close()
    assert "exited with code 1 during start-up" in str(info.value)
    assert "Error booting VMM: bad flag" in str(info.value)


def test_terminate_after_the_child_exited_returns_its_status(tmp_path) -> None:
    proc = _spawn(tmp_path, _script(tmp_path, "kill -USR1 $$"))
    try:
        proc.wait(10)
        assert proc.terminate() == -signal.SIGUSR1
        assert proc.returncode == -signal.SIGUSR1
    finally:
        proc.close()
    proc.close()  # idempotent


def test_the_log_holds_the_current_vmms_words_only(tmp_path) -> None:
    # An earlier VMM's failure must not be read as this one's (CH truncates its log file
    # itself; a VMM that appends, or writes nothing, finds it emptied all the same).
    (tmp_path / "vmm.log").write_text("ERROR -- VCPU generated error: VcpuRun(earlier VMM)\n")
    proc = _spawn(tmp_path, _script(tmp_path, "echo 'said on stdout'"))
    try:
        assert proc.wait(10) == 0
        assert proc.failure() is None
        assert (tmp_path / "vmm.log").read_text() == "said on stdout\n"
    finally:
        proc.close()

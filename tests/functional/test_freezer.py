"""The Velero backup hook's `virt-freezer` against a real ch-launcher, run as the image runs it
(`python -ISOO .../ch_launcher/freezer.py`: no site-packages): with no guest agent it exits 0
without freezing, as upstream's does, so backups proceed. (With an agent: tests/unit/test_freezer.py.)"""

from __future__ import annotations

import subprocess
import sys

import pytest

from ch_launcher import freezer as freezer_module
from tests.functional.harness import Harness


@pytest.fixture
def vh():
    h = Harness()
    yield h
    h.close()


def freezer(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-ISOO", freezer_module.__file__, *args], capture_output=True, text=True,
                          timeout=30, check=False)


def test_the_backup_hook_finds_no_guest_agent_and_lets_the_backup_proceed(vh):
    vh.run(vh.boot())
    for action in ("--freeze", "--unfreeze"):
        done = freezer(action, "--name", "testvmi", "--namespace", "default", "--socket", str(vh.layout.cmd_socket))
        assert done.returncode == 0, done.stderr
        assert "No guest agent, exiting" in done.stderr
    # The VM kept running: nothing was paused or frozen.
    assert vh.run(vh.client.get_domain())["Status"]["Status"] == "Running"


def test_the_backup_hook_fails_when_the_launcher_cannot_be_reached(tmp_path):
    done = freezer("--freeze", "--name", "v", "--namespace", "n", "--socket", str(tmp_path / "absent"))
    assert done.returncode == 1
    assert "Failed to get guest info" in done.stderr


@pytest.mark.parametrize("args", [["--name", "v", "--namespace", "n"], ["--freeze", "--namespace", "n"]])
def test_the_backup_hook_refuses_incomplete_flags_like_upstream(args, tmp_path):
    done = freezer(*args, "--socket", str(tmp_path / "absent"))
    assert done.returncode == 1

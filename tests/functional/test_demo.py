"""`make demo`: the VMI of examples/ through the real launcher on the simulated VMM, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO


def test_make_demo_walks_a_vmi_from_sync_to_delete_and_says_so():
    env = {k: v for k, v in os.environ.items() if k != "CH_BINARY"}  # the simulated VMM
    done = subprocess.run([sys.executable, "-m", "demo", "examples/vmi-demo.yaml"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "on the simulated VMM (CH_BINARY is not set)" in out
    steps = ["ADDED Running/Unknown", "MODIFIED Paused/User", "MODIFIED Shutoff/Shutdown", "MODIFIED deleted",
             "ch-launcher exited with 0", "demo passed"]
    positions = [out.find(step) for step in steps]
    assert -1 not in positions and positions == sorted(positions), out

"""Cloud Hypervisor's TPM on a real swtpm (Debian's): the VMM connects to swtpm's control socket
when the VM boots and initialises the TPM, which makes swtpm write its state; a VMM booted on the
same state again loads that TPM instead of manufacturing a new one."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.contract.harness import Backend, Vmm

pytestmark = pytest.mark.skipif(shutil.which("swtpm") is None, reason="swtpm is not installed (Debian package swtpm)")


def _swtpm(state: str, sock: str) -> subprocess.Popen[bytes]:
    os.makedirs(state, exist_ok=True)
    proc = subprocess.Popen(["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={state},mode=0600",
                             "--ctrl", f"type=unixio,path={sock},mode=0600"])
    deadline = time.monotonic() + 10
    while not os.path.exists(sock):
        assert proc.poll() is None and time.monotonic() < deadline, "swtpm did not open its socket"
        time.sleep(0.02)
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    proc.wait(5)


def test_the_vmm_initialises_the_tpm_at_boot_and_a_second_boot_finds_the_same_tpm(
        backend: Backend, start: Callable[..., Vmm], sdir: str) -> None:
    state, sock = os.path.join(sdir, "tpm2"), os.path.join(sdir, "swtpm.sock")
    permall = os.path.join(state, "tpm2-00.permall")
    images = []
    for run in range(2):
        tpm = _swtpm(state, sock)
        try:
            vmm = start(backend, name=f"tpm{run}")
            vmm.client.create(vmm.config(tpm={"socket": sock}))
            vmm.client.boot()
            assert vmm.client.info().state == "Running"
            deadline = time.monotonic() + 10
            while not os.path.exists(permall):
                assert time.monotonic() < deadline, "swtpm wrote no state: the VMM did not initialise the TPM"
                time.sleep(0.02)
            vmm.stop()
        finally:
            _stop(tpm)
        images.append(Path(permall).read_bytes())
    # A TPM manufactured anew differs from the first in its random seeds, in hundreds of bytes;
    # the same TPM loaded again differs at most in a few counters (TPM2_Startup's reset count).
    same = sum(a != b for a, b in zip(images[0], images[1], strict=False)) + abs(len(images[0]) - len(images[1]))
    assert same < 32, f"{same} bytes of the TPM state changed between the two boots: a new TPM?"

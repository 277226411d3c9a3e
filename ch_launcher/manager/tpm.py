"""The swtpm process behind a VM's TPM (`convert.tpm`). Imported only for a VMI with a TPM.

One `swtpm socket --tpm2` per VM, started before the VMM boots the VM (Cloud Hypervisor connects
to its control socket while it creates devices) and kept across VMM restarts (a soft reboot's new
VMM connects again and re-initialises the TPM, as a power cycle does); stopped when the VM is
forgotten or the launcher ends. Its state directory is the VM's: on the VM state PVC for
`persistent: true`, so the TPM's seeds and NV contents survive the pod.

The command line is libvirt's for a TPM 2.0 emulator (`qemuTPMEmulatorBuildCommand`), less what
libvirt needs and this launcher does not: no `--terminate` (the VMM may be replaced), no
`--daemon` (the launcher supervises it as a child). Cloud Hypervisor sends CMD_INIT and
TPM2_Startup itself (`tpm/src/emulator.rs@v53.0`), so no `--flags startup-clear`.

Failure behaviour: `start()` raises CommandFailed naming `spec.domain.devices.tpm` when swtpm
is missing, exits, or does not open its socket within the timeout; its log is quoted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import subprocess
from typing import TYPE_CHECKING

from ch_launcher.kubevirt import paths
from ch_launcher.manager.settings import CommandFailed

if TYPE_CHECKING:
    from ch_launcher.convert.plan import TpmSpec

log = logging.getLogger(__name__)
FIELD = "spec.domain.devices.tpm"


def swtpm_command(spec: TpmSpec, binary: str) -> list[str]:
    return [binary, "socket", "--tpm2",
            "--tpmstate", f"dir={spec.state_dir},mode=0600",
            "--ctrl", f"type=unixio,path={spec.socket},mode=0600",
            "--log", f"file={spec.log_file},level=1"]


class Swtpm:
    """One swtpm child process."""

    def __init__(self, spec: TpmSpec) -> None:
        self.spec = spec
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    async def start(self, timeout: float = 10.0) -> None:
        """Start swtpm (idempotent while it runs) and wait for its control socket."""
        if self.proc is not None and self.proc.poll() is None:
            return
        spec = self.spec
        binary = os.environ.get("CH_SWTPM") or shutil.which(paths.SWTPM_BINARY) or ""
        if not binary:
            raise CommandFailed(f"{FIELD}: cannot run the TPM: swtpm is not installed (Debian package swtpm)")
        try:
            os.makedirs(spec.state_dir, mode=0o700, exist_ok=True)
            os.makedirs(os.path.dirname(spec.socket), mode=0o700, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(spec.socket)  # a stale socket of an earlier swtpm
        except OSError as e:
            raise CommandFailed(f"{FIELD}: cannot prepare the TPM state directory {spec.state_dir}: "
                                f"{e.strerror}") from None
        argv = swtpm_command(spec, binary)
        log.info("starting swtpm: %s", " ".join(argv))
        try:
            self.proc = subprocess.Popen(argv,  # noqa: ASYNC220 - fork+exec, no waiting: it returns at once stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, close_fds=True)
        except OSError as e:
            raise CommandFailed(f"{FIELD}: cannot start swtpm ({binary}): {e.strerror}") from None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not os.path.exists(spec.socket):  # noqa: ASYNC240 - one stat of a local path per round
            code = self.proc.poll()
            if code is not None:
                error = (self.proc.stderr.read() if self.proc.stderr else b"").decode(errors="replace").strip()
                self.proc = None
                raise CommandFailed(f"{FIELD}: swtpm exited with code {code} before opening its socket: "
                                    f"{error or self._log_tail()}")
            if loop.time() > deadline:
                await self.stop()
                raise CommandFailed(f"{FIELD}: swtpm did not open {spec.socket} within {timeout:g} s")
            await asyncio.sleep(0.02)
        log.info("swtpm is up (pid %d), state in %s", self.proc.pid, spec.state_dir)

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError), open(self.spec.log_file, errors="replace") as f:
            return " ".join(f.read().splitlines()[-3:])
        return ""

    async def stop(self, timeout: float = 3.0) -> None:
        """SIGTERM (swtpm writes its state and exits), SIGKILL after `timeout`; always reaped."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                await asyncio.to_thread(proc.wait, timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                await asyncio.to_thread(proc.wait)
        if proc.stderr is not None:
            proc.stderr.close()

"""What the contract tests of live migration share, and bench/migration.py with them: whether
this host can complete a migration, the receive in a thread, the environment without backtraces."""

from __future__ import annotations

import os
import threading
from typing import Any

from ch_launcher.ch.api import ChApiError
from tests.contract.harness import Vmm


def host_snapshots_vcpus() -> bool:
    """False on a PVM host, where KVM_GET_NESTED_STATE fails and no real migration completes."""
    return not os.path.exists("/sys/module/kvm_pvm")


def no_backtrace_env() -> dict[str, str]:
    """The VMM's environment without RUST_BACKTRACE (see test_a_backtrace_...)."""
    return {"RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}


class Receive:
    """`vm.receive-migration` in a thread (it blocks the target's API until the end)."""

    def __init__(self, vmm: Vmm, url: str, timeout: float = 60.0) -> None:
        self.result: Any = None
        self.done = threading.Event()

        def run() -> None:
            try:
                vmm.client.receive_migration(url, timeout=timeout)
                self.result = "ok"
            except ChApiError as exc:
                self.result = exc
            self.done.set()

        vmm.events.set_mark()
        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        vmm.events.wait_for("vm:migration-receive-ready", timeout=10)

    def wait(self, timeout: float = 60.0) -> Any:
        assert self.done.wait(timeout), f"vm.receive-migration did not answer within {timeout} s"
        return self.result

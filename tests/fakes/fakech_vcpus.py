"""The simulated VMM's vCPU threads, named as Cloud Hypervisor names them so the launcher finds them.

Cloud Hypervisor runs vCPU n in a thread named `vcpu<n>` (`vmm/src/cpu.rs@v53.0` `start_vcpu`),
started when the VM boots and for each vCPU a growing `vm.resize` adds, ended when the VM stops
(and made again by a reboot, which builds a new Vm). The launcher's GetDomainStats reads each
one's run time, delay and CPU affinity from `/proc/<pid>/task/<tid>` (`ch_launcher.stats`). Here
each thread only waits for its end: the simulated guest never runs, so it costs no CPU.
A vCPU removed by a shrinking resize keeps its thread until the guest has offlined it
(`FAKE_CH_VCPU_REMOVAL_DELAY`), as the real one does.

Stdlib only.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
from typing import Any

_PR_SET_NAME = 15  # linux/prctl.h
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _name_this_thread(name: str) -> None:
    """The kernel's name of the calling thread (`/proc/<pid>/task/<tid>/comm`, at most 15 bytes);
    Python before 3.14 leaves it the process's."""
    _libc.prctl(_PR_SET_NAME, name.encode()[:15], 0, 0, 0)


class VcpuThreads:
    """The `vcpu<n>` threads of one Vm. `resize(n)` keeps exactly vCPUs 0..n-1; `stop()` ends all.
    `affinity` is the config's `cpus.affinity` (`[{vcpu, host_cpus}]`): each thread pins itself,
    as CH's vCPU thread does before it runs (best effort here: a CPU the host lacks is ignored)."""

    def __init__(self, affinity: Any = None) -> None:
        self._threads: dict[int, tuple[threading.Thread, threading.Event]] = {}
        self._affinity: dict[int, list[int]] = {}
        for item in affinity if isinstance(affinity, list) else []:
            if isinstance(item, dict) and isinstance(item.get("vcpu"), int) and isinstance(item.get("host_cpus"), list):
                self._affinity[item["vcpu"]] = [c for c in item["host_cpus"] if isinstance(c, int)]

    def resize(self, count: int) -> None:
        for index in range(count):
            if index not in self._threads:
                done = threading.Event()
                thread = threading.Thread(target=self._run, args=(index, done, self._affinity.get(index)),
                                          name=f"vcpu{index}", daemon=True)
                thread.start()
                self._threads[index] = (thread, done)
        for index in [i for i in self._threads if i >= count]:
            self._end(index)

    def stop(self) -> None:
        for index in list(self._threads):
            self._end(index)

    def _end(self, index: int) -> None:
        thread, done = self._threads.pop(index)
        done.set()
        thread.join(1.0)

    @staticmethod
    def _run(index: int, done: threading.Event, host_cpus: list[int] | None) -> None:
        _name_this_thread(f"vcpu{index}")
        if host_cpus:
            with contextlib.suppress(OSError):
                os.sched_setaffinity(0, host_cpus)  # 0: the calling thread
        done.wait()

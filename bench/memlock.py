#!/usr/bin/env python3
"""The memlock limit of a launcher pod's VMM before and after virt-handler's raise
(docs/process-model.md), and what the raise costs the Sync, all in one run per VMM:

- in the pod sandbox (uid 107, only NET_BIND_SERVICE: tests/functional/pod_sandbox.py), a launcher
  with `--kubevirt-runtime-processes` and a VMI with `memory.reservedOverhead.memLock: Required`
  starts with a soft memlock limit below its hard one; the limits (soft/hard, /proc/<pid>/limits)
  of the monitor, the launcher, its `virtqemud` and the VMM it started at once are read *before*;
- virt-handler's AdjustResources raises virtqemud's limit (tests/functional/kubevirt_runtime.py:
  to unlimited where permitted, else the soft limit to the hard one), then the Sync: the VMM that
  boots the VM is read *after* (its limit, and VmLck: what it really locked);
- the same VMI without memLock, in the same tree and the same run, is the baseline of the Sync
  -> Running time: the difference is the VMM replaced by one that inherits the raise.

    python bench/memlock.py [--rounds N]

Needs root (the pod sandbox); the real VMM also needs ../shared/vmm (or CH_BINARY) and the tiny
guest's tools; a VMM that cannot run here is said and skipped (exit 0: `make bench` runs all).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.functional import kubevirt_runtime as vh  # noqa: E402
from tests.functional.harness import Harness, make_vmi  # noqa: E402
from tests.functional.pod_fixtures import real_vmm, real_vmm_reason  # noqa: E402
from tests.functional.pod_sandbox import PodSandbox, missing_requirements  # noqa: E402

START_SOFT = 64 << 10  # the launcher's soft limit at start (Docker's default); the hard one stays


def vmi(lock: bool, guest: int) -> dict:
    v = make_vmi()
    v["spec"]["domain"]["memory"] = {"guest": str(guest)}
    if lock:
        v["spec"]["domain"]["memory"]["reservedOverhead"] = {"memLock": "Required"}
    v["spec"]["domain"]["resources"]["requests"]["memory"] = str(guest)
    return v


def vm_lck(pid: int) -> int:
    """VmLck of `pid` in bytes (what it has locked)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmLck:"):
                return int(line.split()[1]) * 1024
    return 0


async def until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {timeout} s")
        await asyncio.sleep(0.02)
    return value


def the_vmm(h: Harness) -> int | None:
    _, ppid = vh.socket_owner(str(h.layout.cmd_socket))
    try:
        return vh.find_qemu(ppid)
    except LookupError:
        return None


def one_round(kind: str, lock: bool, guest: int) -> dict:
    """One launcher in a fresh pod sandbox: the limits before and after, Sync -> Running in s."""
    with PodSandbox() as pod:
        h = Harness(vmi=vmi(lock, guest), pod=pod, real=real_vmm(pod) if kind == "real" else None,
                    runtime_processes=True)
        try:
            return h.run(_story(h, lock))
        finally:
            h.close()


async def _story(h: Harness, lock: bool) -> dict:
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (min(START_SOFT, hard), hard))
    try:
        await h.start()
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))
    owner, monitor = vh.socket_owner(str(h.layout.cmd_socket))
    virtqemud = vh.find_virtqemud(owner)
    warm = await until(lambda: the_vmm(h), 30, "the VMM under the monitor")
    out = {"before": {"monitor": vh.memlock(monitor), "launcher": vh.memlock(owner),
                      "virtqemud": vh.memlock(virtqemud), "VMM": vh.memlock(warm)}}
    if lock:  # virt-handler's AdjustResources before the first Sync, for the VMIs it acts on only
        vh.adjust_resources(virtqemud)
    out["virtqemud raised"] = vh.memlock(virtqemud)
    started = time.monotonic()
    await h.client.sync(h.vmi)
    await h.recorder.wait_for_status("Running", timeout=60)
    out["sync"] = time.monotonic() - started
    vmm = vh.find_qemu(monitor)
    out["after"] = {"VMM": vh.memlock(vmm)}
    out["replaced"] = vmm != warm
    out["VmLck"] = vm_lck(vmm)
    return out


def fmt(limit: tuple[str, str]) -> str:
    def one(v: str) -> str:
        return v if not v.isdigit() else (f"{int(v) >> 20} MiB" if int(v) >= 1 << 20 else f"{int(v) >> 10} KiB")
    return f"{one(limit[0])}/{one(limit[1])}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = missing_requirements()
    if reason:
        print(f"memlock: the pod sandbox cannot run here ({reason}); nothing measured")
        return 0
    unlimited = vh.can_raise_memlock_to_unlimited()
    _, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    # Where the raise can only reach the hard limit, the VM must fit in it to boot at all.
    guest = 128 << 20 if unlimited or hard == resource.RLIM_INFINITY else hard
    print(f"memlock before/after virt-handler's raise (pod sandbox, uid 107; started with soft {START_SOFT >> 10} KiB "
          f"under hard {fmt((str(hard), str(hard))).split('/')[1]}; "
          f"raise to {'unlimited' if unlimited else 'the hard limit: no CAP_SYS_RESOURCE here'}; "
          f"guest {guest >> 20} MiB; load {os.getloadavg()[0]:.1f}; {args.rounds} rounds per VMI)")
    for kind in ("simulated", "real"):
        if kind == "real" and (why := real_vmm_reason()):
            print(f"  real VMM: not run ({why})")
            continue
        locked, plain = [], []
        for _ in range(args.rounds):
            locked.append(one_round(kind, True, guest))
            plain.append(one_round(kind, False, guest))
        first = locked[0]
        print(f"  {kind} VMM, memLock Required: before: " + ", ".join(
            f"{name} {fmt(v)}" for name, v in first["before"].items())
            + f"; virtqemud raised to {fmt(first['virtqemud raised'])}; "
            f"after: the VMM that boots {fmt(first['after']['VMM'])}"
            f" (replaced in {sum(r['replaced'] for r in locked)}/{len(locked)} rounds), "
            f"VmLck {first['VmLck'] >> 10} KiB")
        print(f"  {kind} VMM, without memLock (no raise): the VMM {fmt(plain[0]['after']['VMM'])} "
              f"(replaced in {sum(r['replaced'] for r in plain)}/{len(plain)} rounds)")
        with_lock = statistics.median(r["sync"] for r in locked) * 1000
        without = statistics.median(r["sync"] for r in plain) * 1000
        print(f"  {kind} VMM, Sync -> Running p50: {with_lock:.0f} ms with memLock (VMM replaced), "
              f"{without:.0f} ms without (baseline, same run): {with_lock / without:.2f}x")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())

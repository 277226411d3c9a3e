#!/usr/bin/env python3
"""Live migration of a VM with N GiB of memory on the real cloud-hypervisor (../shared/vmm or
CH_BINARY, the tiny guest of tests/guest/ as its firmware), both ways in one run, through the same
stand-in of virt-handler's migration proxies (tests/functional/migration_proxy.py: the source pod's
unix socket, TCP on loopback, the target pod's unix socket):

- **ch-launcher**: two launchers, each in its own pod sandbox with its own VMM
  (tests/functional/migration_handler.py), SyncMigrationTarget then MigrateVirtualMachine with
  virt-handler's default MigrationOptions; each launcher's relay sits between its VMM and the
  proxy socket (docs/migration.md §3.1). Times are when virt-handler's stand-in receives the
  Domain events.
- **baseline**: two bare VMMs of the same binary and VM config; `vm.receive-migration` on a unix
  socket the target proxy dials, `vm.send-migration` to the source proxy's socket. Times are when
  the source VMM's events are read from its event monitor.
- **baseline+hops**: the baseline with two plain splice forwarders (bench/splice_hop.py) where the
  launchers' relays sit, between each VMM and its proxy socket: the two extra hops alone, the
  floor of any relay. Its ratio to the baseline is what the hops cost; ch-launcher's ratio to it
  is what the relays cost beyond them (reading the protocol, counting, the launchers).

Figures, per path and as a ratio ch-launcher / baseline:

- **memory phase**: from the request to the switch-over (the VM paused after the last pre-copy
  iteration: `vm:pausing`; Domain Paused/Migration), i.e. sending every page of guest RAM;
  its throughput (guest RAM / memory phase);
- **total**: from the request to the end of the migration (completed, or failed);
- **downtime**: completed: from the pause to the target running (baseline: `vm:pausing` to the
  receiver's `vm.receive-migration` answer; ch-launcher: Paused/Migration on the source to the
  target's Running); failed switch-over: the source VM's pause until it runs again (the time a
  failed attempt costs the guest), marked so.

On PVM hosts (this project's machines) every real switch-over fails with `GetNestedState`
(docs/migration.md §2) after all memory was sent: the memory phase and the failed switch-over's
pause are what can be measured; no completed migration, so no real downtime. Where no real VMM
or no pod sandbox can run, it says why and exits 0 (`make bench` runs every benchmark).

    python bench/migration.py [--memory-gib N] [--rounds R]

Timings depend on the machine's load (printed); compare within one run.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.splice_hop import SpliceHop  # noqa: E402
from tests import real_vmm  # noqa: E402
from tests.contract.harness import Vmm, launch, real_backend  # noqa: E402
from tests.contract.migration_support import Receive, host_snapshots_vcpus, no_backtrace_env  # noqa: E402
from tests.functional.harness import RealVmm  # noqa: E402
from tests.functional.migration_handler import DIRECT_PORT, MigrationPair, migratable_vmi, migration_of  # noqa: E402
from tests.functional.migration_proxy import ProxyManager  # noqa: E402
from tests.functional.pod_sandbox import missing_requirements  # noqa: E402
from tests.guest.build import guest_payload  # noqa: E402

TIMEOUT = 600.0  # a whole migration of the largest VM on a loaded machine


@dataclass
class Round:
    memory_phase: float
    total: float
    pause: float | None   # downtime (completed) or the failed attempt's pause
    completed: bool


class EarlyFailure(Exception):
    """The migration failed before its switch-over (not a round of the figures; printed)."""


def unavailable() -> str | None:
    reason = real_vmm.unavailable(tiny_guest=True)
    if reason:
        return f"no real VMM: {reason}"
    return missing_requirements()


# --- baseline: Cloud Hypervisor's own send/receive ------------------------------------------------


def baseline_round(memory: int, *, hops: bool = False) -> Round:
    """One migration between two bare VMMs; with `hops`, through a SpliceHop on each side."""
    root = tempfile.mkdtemp(prefix="kcbm", dir="/tmp")
    backend = real_backend()
    vmms: list[Vmm] = []
    proxies = ProxyManager()
    forwarders: list[SpliceHop] = []
    uid = str(uuid.uuid4())
    try:
        src = launch(backend, root, name="src", env=no_backtrace_env())
        vmms.append(src)
        dst = launch(backend, root, name="dst", env=no_backtrace_env())
        vmms.append(dst)
        src.client.create(src.config(memory={"size": memory}, payload={"firmware": str(guest_payload())}))
        src.client.boot()
        src.events.wait_for("vm:booted", timeout=30)
        # named as in the target pod, so the target proxy publishes it as port 49152
        os.makedirs(os.path.join(root, "target"))
        receive_socket = os.path.join(root, "target", f"{uid}-{DIRECT_PORT}-source.sock")
        vmm_receives = os.path.join(root, "receive.sock") if hops else receive_socket
        receive = Receive(dst, f"unix:{vmm_receives}", timeout=TIMEOUT)
        if hops:
            forwarders.append(SpliceHop(receive_socket, vmm_receives))
        proxies.start_target_listener(uid, [os.path.join(root, "virtqemud-sock"), receive_socket])
        ports = proxies.get_target_listener_ports(uid)
        proxies.start_source_listener(uid, "127.0.0.1", ports, os.path.join(root, "source"))
        (send_socket,) = [f for f in proxies.get_source_listener_files(uid)
                          if f.endswith(f"-{DIRECT_PORT}-source.sock")]
        if hops:
            forwarders.append(SpliceHop(os.path.join(root, "send.sock"), send_socket))
            send_socket = forwarders[-1].listen_path
        for hop in forwarders:
            hop.start()
        src.events.set_mark()
        begun = time.monotonic()
        src.client.send_migration(f"unix:{send_socket}")
        src.events.wait_for("vm:pausing", timeout=TIMEOUT)
        paused = time.monotonic()
        # the end: the receiver answers (completed), or the source fails; a failed source does
        # not end the receive, whose leg the proxies never close (upstream's handleConnection)
        deadline = paused + TIMEOUT
        while not receive.done.is_set() and "vm:migration-failed" not in src.events.since_mark():
            if time.monotonic() > deadline:
                raise TimeoutError("the migration did not end")
            src.events.poll(0.05)
        ended = time.monotonic()
        if receive.done.is_set() and receive.result == "ok":
            return Round(paused - begun, ended - begun, ended - paused, True)
        resumed = src.events.wait_for("vm:resumed", timeout=60)
        pausing = next(e for e in src.events.seen[src.events.mark:] if e.name == "vm:pausing")
        return Round(paused - begun, ended - begun, resumed.timestamp - pausing.timestamp, False)
    finally:
        proxies.close()
        for vmm in vmms:
            vmm.stop()
        for hop in forwarders:
            hop.close()
        shutil.rmtree(root, ignore_errors=True)


# --- ch-launcher ----------------------------------------------------------------------------------


def launcher_round(memory: int) -> Round:
    found = RealVmm.from_environment(tiny_guest=True)
    assert not isinstance(found, str), found
    pair = MigrationPair(migratable_vmi(memory=f"{memory >> 20}Mi"), real=found)
    src, tgt = pair.source, pair.target

    async def run() -> Round:
        await src.boot()
        ports = await pair.prepare_target()
        begun = time.monotonic()
        reply = await pair.migrate(ports)
        assert reply.success, reply.message
        paused = await src.recorder.wait_for(lambda e: (e.status == "Paused" and e.reason == "Migration")
                                             or bool((migration_of(e) or {}).get("EndTimestamp")), timeout=TIMEOUT)
        if paused.status != "Paused":
            reason = (migration_of(paused) or {}).get("FailureReason") or "no reason"
            if "GetNestedState" not in reason:  # it ended before any switch-over
                raise EarlyFailure(reason)
            # the switch-over failed, but the pause and resume came and went between two Domain
            # reports (ms apart on the VMM's own clock): the end is the end of the memory phase
            return Round(paused.at - begun, paused.at - begun, None, False)
        end = await src.recorder.wait_for(lambda e: bool((migration_of(e) or {}).get("EndTimestamp")),
                                          timeout=TIMEOUT)
        if not (migration_of(end) or {}).get("Failed"):
            running = await tgt.recorder.wait_for(lambda e: e.status == "Running", timeout=TIMEOUT)
            return Round(paused.at - begun, end.at - begun, running.at - paused.at, True)
        resumed = await src.recorder.wait_for(lambda e: e.status == "Running" and e.at > paused.at, timeout=60)
        await pair.target_command("SignalTargetPodCleanup")
        return Round(paused.at - begun, end.at - begun, resumed.at - paused.at, False)

    try:
        return src.run(run())
    finally:
        pair.print_logs = lambda: None  # type: ignore[method-assign]  # a benchmark prints its figures only
        pair.close()


# --- report ---------------------------------------------------------------------------------------


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memory-gib", type=float, default=1.0, help="guest memory (default %(default)s GiB)")
    parser.add_argument("--rounds", type=int, default=3, help="migrations per path (default %(default)s)")
    args = parser.parse_args()
    reason = unavailable()
    if reason:
        print(f"bench/migration.py: cannot run here ({reason}); nothing measured")
        return 0
    memory = int(args.memory_gib * (1 << 30)) >> 20 << 20
    load = os.getloadavg()
    print(f"live migration, {memory >> 20} MiB guest (the tiny guest, 1 vCPU), {args.rounds} rounds per path, "
          f"one machine, proxies on loopback; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if not host_snapshots_vcpus():
        print("PVM host: every real switch-over fails (GetNestedState) after all memory is sent; "
              "'pause' is the failed attempt's pause of the source VM, not a downtime")
    rows: dict[str, list[Round]] = {"baseline": [], "baseline+hops": [], "ch-launcher": []}
    early = 0
    for _ in range(args.rounds):  # interleaved, so that every path sees the same load
        rows["baseline"].append(baseline_round(memory))
        rows["baseline+hops"].append(baseline_round(memory, hops=True))
        try:
            rows["ch-launcher"].append(launcher_round(memory))
        except EarlyFailure as e:
            early += 1
            print(f"ch-launcher round failed before its switch-over: {e}")
    if not rows["ch-launcher"]:
        print("no ch-launcher round reached its switch-over; nothing to compare")
        return 1
    gib = memory / (1 << 30)
    print(f"{'path':13} {'memory phase s':>15} {'GiB/s':>7} {'total s':>9} {'pause s':>9}  outcome")
    figures: dict[str, dict[str, float]] = {}
    for name, done in rows.items():
        phase = median([r.memory_phase for r in done])
        total = median([r.total for r in done])
        pauses = [r.pause for r in done if r.pause is not None]
        pause = median(pauses) if pauses else float("nan")
        outcome = "completed" if all(r.completed for r in done) else (
            "switch-over failed" if not any(r.completed for r in done) else "mixed")
        unseen = sum(1 for r in done if r.pause is None)
        if unseen:
            outcome += f"; {unseen} round(s) without a Paused/Migration report"
        figures[name] = {"phase": phase, "total": total, "pause": pause}
        print(f"{name:13} {phase:15.3f} {gib / phase:7.2f} {total:9.3f} {pause:9.3f}  {outcome} "
              f"(rounds: {', '.join(f'{r.memory_phase:.2f}' for r in done)} s)")
    for over, under in (("ch-launcher", "baseline"), ("baseline+hops", "baseline"), ("ch-launcher", "baseline+hops")):
        a, b = figures[over], figures[under]
        print(f"ratio {over} / {under}: memory phase {a['phase'] / b['phase']:.2f}x, "
              f"total {a['total'] / b['total']:.2f}x, pause {a['pause'] / b['pause']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

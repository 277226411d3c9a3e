#!/usr/bin/env python3
"""The memory of the process tree virt-handler's KVM runtime needs (docs/process-model.md), in one
run on the simulated VMM: a launcher started with `--kubevirt-runtime-processes`, Synced to
Running; then the PSS and the anonymous part of PSS of its monitor, the launcher itself and its
`virtqemud` spawner, beside a bare `python -I -S` (the floor of any interpreter) measured in the
same run, with each helper's ratio to it.

    python bench/process_model.py [--runs N]

The anonymous part is what a process adds to the pod's memory cgroup: the helpers' file pages
are the launcher's interpreter and libraries, charged to the pod once.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.framework import (  # noqa: E402
    FAKE_CH,
    CmdClient,
    LauncherLayout,
    LauncherProcess,
    NotifyRecorder,
    container_disk_images,
    fake_firmware,
)
from tests.functional.harness import make_vmi  # noqa: E402


def pss_kib(pid: int) -> tuple[int, int]:
    """(PSS, anonymous PSS) in KiB from /proc/<pid>/smaps_rollup."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Pss", "Pss_Anon"):
                values[key] = int(rest.split()[0])
    return values.get("Pss", 0), values.get("Pss_Anon", 0)


async def one_run() -> dict[str, tuple[int, int]]:
    root = pathlib.Path(tempfile.mkdtemp(prefix="kcpm", dir="/tmp"))
    layout = LauncherLayout(root).create()
    vmi = make_vmi()
    fake_firmware(layout)
    container_disk_images(vmi, layout, size=16 << 20)
    recorder = NotifyRecorder(layout.notify_socket)
    meta = vmi["metadata"]
    launcher = LauncherProcess(layout, name=meta["name"], namespace=meta["namespace"], uid=meta["uid"],
                               ch_binary=str(FAKE_CH), extra_args=["--kubevirt-runtime-processes"])
    client = None
    # Popen returns once the child is forked; the loop has nothing else to run yet
    bare = subprocess.Popen([sys.executable, "-I", "-S", "-c", "import sys; sys.stdin.read()"],  # noqa: ASYNC220
                            stdin=subprocess.PIPE)
    try:
        await recorder.start()
        launcher.start()
        await launcher.wait_ready(30.0)
        client = CmdClient(layout.cmd_socket)
        await client.sync(vmi)
        await recorder.wait_for_status("Running", timeout=30)
        await asyncio.sleep(1.0)  # let the launcher settle (release_memory) after the boot
        roles = launcher.roles()
        found = {name: pss_kib(pid) for name in ("monitor", "launcher", "spawner") if (pid := roles[name])}
        found["bare python -I -S"] = pss_kib(bare.pid)
        return found
    finally:
        bare.kill()
        bare.wait()
        if client is not None:
            await client.close()
        launcher.kill()
        await recorder.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"process model memory (simulated VMM, {args.runs} runs; MiB PSS / anonymous PSS)")
    for i in range(args.runs):
        found = asyncio.run(one_run())
        bare_pss = found["bare python -I -S"][0] or 1
        print(f"  run {i + 1}: " + "   ".join(
            f"{name} {p / 1024:5.1f} / {a / 1024:4.1f}"
            + (f" ({p / bare_pss:.2f}x bare)" if name in ("monitor", "spawner") else "")
            for name, (p, a) in found.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

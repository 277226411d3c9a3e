"""The demo itself: one VMI YAML file through the real launcher, printing the lifecycle
(see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc

from ch_launcher.kubevirt import paths
from tests.framework.launcher import FAKE_CH, LauncherLayout, LauncherProcess, container_disk_images, fake_firmware
from tests.framework.virt_handler import CmdClient, CommandError, DomainEvent, NotifyRecorder


def kvm_usable() -> bool:
    return os.access("/dev/kvm", os.R_OK | os.W_OK)


def choose_vmm(environ: Mapping[str, str] | None = None) -> tuple[str, bool, str]:
    """(binary, is_real, why): the real cloud-hypervisor when CH_BINARY is set and /dev/kvm is
    usable, else the simulated VMM."""
    env = os.environ if environ is None else environ
    binary = env.get("CH_BINARY", "")
    if binary and shutil.which(binary) and kvm_usable():
        return shutil.which(binary) or binary, True, f"the real cloud-hypervisor ({binary}) on /dev/kvm"
    why = ("CH_BINARY is not set" if not binary else f"{binary} is not executable" if not shutil.which(binary)
           else "/dev/kvm is not usable")
    return str(FAKE_CH), False, f"the simulated VMM ({why})"


def load_vmi(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as f:
        vmi = yaml.safe_load(f)
    if not isinstance(vmi, dict) or vmi.get("kind") != "VirtualMachineInstance":
        raise SystemExit(f"{path}: not a VirtualMachineInstance")
    meta = vmi.setdefault("metadata", {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", str(uuid.uuid4()))
    vmi.setdefault("status", {})["phase"] = "Scheduled"
    return vmi


async def run_demo(vmi_path: str, *, out: Callable[[str], None] = print) -> int:
    vmi = load_vmi(vmi_path)
    meta = vmi["metadata"]
    binary, real, why = choose_vmm()
    out(f"ch-launcher demo: VMI {meta['namespace']}/{meta['name']} on {why}")
    root = pathlib.Path(tempfile.mkdtemp(prefix="kcdemo", dir="/tmp"))
    layout = LauncherLayout(root).create()
    env = dict(os.environ)
    if real:  # set-up before the launcher starts: nothing else waits on the loop yet
        fw = env.get("CH_FIRMWARE_DIR", paths.FIRMWARE_DIR)
        for name in ("hypervisor-fw", "CLOUDHV.fd"):
            if os.path.exists(os.path.join(fw, name)):  # noqa: ASYNC240
                shutil.copyfile(os.path.join(fw, name), layout.firmware_dir / name)
    else:
        fake_firmware(layout)
    container_disk_images(vmi, layout, image=env.get("CH_DEMO_IMAGE") if real else None)
    t0 = time.monotonic()

    def show(event: DomainEvent) -> None:
        out(f"  [{time.monotonic() - t0:7.3f}s] notify  {event}")

    recorder = await NotifyRecorder(layout.notify_socket, on_event=show).start()
    launcher = LauncherProcess(layout, name=meta["name"], namespace=meta["namespace"], uid=meta["uid"],
                               ch_binary=binary, grace_period_seconds=int(vmi["spec"].get(
                                   "terminationGracePeriodSeconds", 30)) + 15, env=env).start()
    client: CmdClient | None = None
    ok = False
    try:
        ready = await launcher.wait_ready(10.0)
        out(f"  [{time.monotonic() - t0:7.3f}s] ready   launcher-sock after {ready * 1000:.0f} ms")
        client = CmdClient(layout.cmd_socket)

        async def step(what: str, coro: Any) -> Any:
            out(f"  [{time.monotonic() - t0:7.3f}s] cmd     {what}")
            return await coro

        out(f"  [{time.monotonic() - t0:7.3f}s] cmd     CmdInfo.Info -> {await client.info()}")
        await step("SyncVirtualMachine", client.sync(vmi))
        await recorder.wait_for_status("Running", timeout=30)
        vmi["status"]["phase"] = "Running"
        domain = await step("GetDomain", client.get_domain())
        out(f"            domain {domain['Spec']['Name']}: {domain['Status']['Status']}, "
            f"{domain['Spec']['VCPU']['CPUs']} vCPU(s), {len(domain['Spec']['Devices']['Disks'] or [])} disk(s)")
        await step("PauseVirtualMachine", client.vmi_command("PauseVirtualMachine", vmi))
        await recorder.wait_for_status("Paused", "User")
        await step("SyncVirtualMachine (again: a paused-by-user VM stays paused)", client.sync(vmi))
        await step("UnpauseVirtualMachine", client.vmi_command("UnpauseVirtualMachine", vmi))
        await recorder.wait_for_status("Running", since=len(recorder.events) - 1)
        stats = await step("GetDomainStats", client.get_domain_stats())
        if stats:
            cpu = stats.get("Cpu") or {}
            mem = stats.get("Memory") or {}
            out(f"            stats {stats['Name']}: cpu {cpu.get('Time', 0) / 1e9:.3f}s, "
                f"rss {mem.get('RSS', 0) / 1024:.1f} MiB, {len(stats.get('Vcpu') or [])} vCPU thread(s)")
        since = len(recorder.events)
        await step("ShutdownVirtualMachine (ACPI power button)", client.vmi_command("ShutdownVirtualMachine", vmi))
        try:
            await recorder.wait_for_status("Shutoff", since=since, timeout=10)
        except TimeoutError:
            out("            the guest ignored ACPI: killing it, as virt-handler does after the grace period")
            await step("KillVirtualMachine", client.vmi_command("KillVirtualMachine", vmi))
            await recorder.wait_for_status("Shutoff", since=since, timeout=20)
        await step("DeleteVirtualMachine", client.vmi_command("DeleteVirtualMachine", vmi))
        await recorder.wait_for_deleted(since=since)
        code = await launcher.wait_exit(60)
        out(f"  [{time.monotonic() - t0:7.3f}s] exit    ch-launcher exited with {code}")
        ok = code == 0
    except (CommandError, TimeoutError, RuntimeError, grpc.aio.AioRpcError) as e:
        out(f"demo failed: {e}")
        out(f"launcher log ({layout.log_file}):\n{launcher.log_text()[-4000:]}")
    finally:
        if client is not None:
            await client.close()
        launcher.stop()
        await recorder.stop()
        if ok:
            shutil.rmtree(root, ignore_errors=True)
    out("demo passed" if ok else f"demo FAILED (files kept in {root})")
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a VMI through ch-launcher without a cluster.")
    parser.add_argument("vmi", help="VirtualMachineInstance YAML file")
    args = parser.parse_args(argv)
    return asyncio.run(run_demo(args.vmi, out=lambda line: print(line, flush=True)))

#!/usr/bin/env python3
"""ch-launcher's footprint in the configuration the launcher image runs, on the real VMM:

- memory of one launcher (RSS, PSS, anonymous) after a Sync with the real cloud-hypervisor and
  the tiny guest (tests/guest/) running a 1 GiB / 1 vCPU VM, beside a bare interpreter and a bare
  grpc.aio server measured in the same run (the ratios are printed), and where it goes: the
  launcher's mappings by kind, its threads, and the import attribution of its modules;
- the same per launcher with N launchers side by side (default 50, each with its own VMM; all
  but the first VM paused once booted, since the tiny guest polls its serial port), as on a
  node where they share the image's files;
- the cloud-hypervisor process beside it: its own memory and the guest RAM it has touched, and
  alone for a few sizes (vCPUs, disks, guest memory) to show what each adds;
- GetDomain latency while 16 clients call it and the VM emits events (pause/resume), beside
  the same 16 clients against a bare grpc.aio server answering the same RPC (the floor).

    python bench/footprint.py [--launchers N] [--clients 16] [--seconds S]

"The configuration the image runs": a virtualenv under build/bench/ with `pip install
'.[launcher]'` (no test or admission dependencies), byte-compiled as the Containerfile's launcher
stage does, the environment of the Containerfile's ENV lines (PYTHONOPTIMIZE, MALLOC_ARENA_MAX,
...), and the `ch-launcher` console script. The VMM is ../shared/vmm/cloud-hypervisor (or
CH_BINARY) on /dev/kvm; without it the benchmark says so and uses the simulated VMM.

PSS divides each shared page among the processes that map it: a lone launcher shares little
(libc with its VMM; on this shared machine also libraries other processes map), 50 launchers
share the image's files. Anonymous memory is what no other process can share: the floor per
launcher however many run. Figures depend on the machine's load; compare within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from typing import Any

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.framework import CmdClient, LauncherLayout, LauncherProcess, NotifyRecorder, container_disk_images  # noqa: E402
from tests.framework.launcher import FAKE_CH  # noqa: E402
from tests.functional.harness import make_vmi  # noqa: E402
from tests.guest.build import guest_payload, missing_tools  # noqa: E402
from tests.manifests.containerfile import parse  # noqa: E402

SHARED_CH = REPO.parent / "shared" / "vmm" / "cloud-hypervisor"
BENCH_DIR = REPO / "build" / "bench"
GUEST_MEMORY = 1 << 30

# A bare interpreter, and a bare grpc.aio server that answers GetDomain with fixed bytes (a
# serialized DomainResponse made by the benchmark): the same RPC the launcher serves, without it.
BARE_INTERPRETER = "import sys; print('ready', flush=True); sys.stdin.read()"
BARE_SERVER = textwrap.dedent("""
    import asyncio, sys
    import grpc
    ANSWER = open(sys.argv[2], "rb").read()
    async def get_domain(request, context):
        return ANSWER
    async def main():
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler("kubevirt.cmd.v1.Cmd", {
            "GetDomain": grpc.unary_unary_rpc_method_handler(get_domain)})
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port("unix:" + sys.argv[1])
        await server.start()
        print("ready", flush=True)
        await server.wait_for_termination()
    asyncio.run(main())
""")

# The load: `clients` channels, each calling GetDomain, pausing `pause` s between calls, for
# `seconds`; prints the latencies (s) as JSON. Runs in its own process (the checkout's
# interpreter), so the benchmark's Notify recorder does not share its event loop.
LOAD_CLIENT = textwrap.dedent("""
    import asyncio, json, sys, time
    import grpc
    from ch_launcher._proto import kubevirt_cmd_v1_pb2 as pb, kubevirt_cmd_v1_pb2_grpc as cmd_grpc
    socket_path, clients, seconds, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    async def client(samples, until):
        async with grpc.aio.insecure_channel("unix:" + socket_path) as channel:
            stub = cmd_grpc.CmdStub(channel)
            for _ in range(20):  # warm-up
                await stub.GetDomain(pb.EmptyRequest(), timeout=5)
            while time.monotonic() < until:
                t = time.perf_counter()
                reply = await stub.GetDomain(pb.EmptyRequest(), timeout=5)
                samples.append(time.perf_counter() - t)
                assert reply.domain
                await asyncio.sleep(pause)
    async def main():
        samples = []
        until = time.monotonic() + 2 + seconds
        await asyncio.gather(*(client(samples, until) for _ in range(clients)))
        print(json.dumps(samples))
    asyncio.run(main())
""")

# What bench/footprint.py imports step by step, in the launcher's own order, for the attribution.
IMPORT_STEPS = (
    ("interpreter", ()),
    ("argparse, logging", ("argparse", "logging")),
    ("asyncio", ("asyncio",)),
    ("grpc", ("grpc", "grpc.aio")),
    ("protobuf + the contract's generated code", ("ch_launcher._proto.kubevirt_cmd_v1_pb2_grpc",
                                                  "ch_launcher._proto.kubevirt_notify_v1_pb2_grpc",
                                                  "ch_launcher._proto.kubevirt_cmd_info_pb2_grpc",
                                                  "ch_launcher._proto.kubevirt_notify_info_pb2_grpc")),
    ("launcher core (cli, server, notify, manager)", ("ch_launcher.cli", "ch_launcher.server", "ch_launcher.notify")),
    ("VMI model (jsonmodel records)", ("ch_launcher.kubevirt.vmi",)),
    ("VMM client (VmConfig records, http.client)", ("ch_launcher.ch.api", "ch_launcher.ch.process")),
    ("translator (convert)", ("ch_launcher.convert",)),
    ("preparation (prepare, the ISO writer)", ("ch_launcher.prepare",)),
    ("dhcp, stats", ("ch_launcher.dhcp", "ch_launcher.stats")),
)
ATTRIBUTION = textwrap.dedent("""
    import gc, importlib, json, sys
    def anon():
        for line in open("/proc/self/smaps_rollup"):
            if line.startswith("Pss_Anon:"):
                return int(line.split()[1])
    out = []
    for label, modules in json.loads(sys.argv[1]):
        before = len(sys.modules)
        for name in modules:
            importlib.import_module(name)
        gc.collect()
        out.append((label, anon(), len(sys.modules) - before))
    print(json.dumps(out))
""")


# --- the image's configuration ----------------------------------------------------------------


def image_environment() -> dict[str, str]:
    """The launcher image's environment: the ENV lines of the Containerfile's launcher target
    and of the stages it is built on, over a minimal PATH."""
    containerfile = parse((REPO / "Containerfile").read_text())
    chain, name = [], "launcher"
    while name in containerfile.stages:
        chain.insert(0, containerfile.stage(name))
        name = containerfile.stage(name).base
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
    for stage in chain:
        for rest in stage.all("ENV"):
            for word in rest.split():
                key, _, value = word.partition("=")
                env[key] = value
    return env


def launcher_venv(env: dict[str, str]) -> pathlib.Path:
    """A virtualenv like the image's /opt/kubevirt-ch: `pip install '.[launcher]'` (dependencies
    cached per pyproject.toml), the project reinstalled from this checkout on every run, and
    byte-compiled for the image's optimization level, as the Containerfile's launcher stage does."""
    key = hashlib.sha256((REPO / "pyproject.toml").read_bytes()).hexdigest()[:12]
    venv = BENCH_DIR / f"launcher-venv-{key}"
    python = venv / "bin" / "python"
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if not python.exists():
        for stale in BENCH_DIR.glob("launcher-venv-*"):  # made for another pyproject.toml
            shutil.rmtree(stale, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([*pip, f"{REPO}[launcher]"], check=True)
    subprocess.run([*pip, "--no-deps", "--force-reinstall", str(REPO)], check=True)
    level = env.get("PYTHONOPTIMIZE", "0") or "0"
    subprocess.run([str(python), "-m", "compileall", "-q", "-j0", "-o", level, str(venv / "lib")], check=True,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                   stdout=subprocess.DEVNULL)
    shutil.rmtree(REPO / "build" / "lib", ignore_errors=True)  # pip's in-tree build
    return venv


# --- measuring --------------------------------------------------------------------------------


def rollup(pid: int) -> dict[str, int]:
    """/proc/<pid>/smaps_rollup in KiB."""
    values = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if len(parts) == 2 and parts[1] == "kB":
                values[key] = int(parts[0])
    return values


def mappings(pid: int) -> list[dict[str, Any]]:
    """Each mapping of /proc/<pid>/smaps: name, size and Rss/Pss/Anonymous in KiB."""
    out: list[dict[str, Any]] = []
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and ":" in parts[3]:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append({"name": parts[5] if len(parts) > 5 else "", "size": (end - start) // 1024})
            elif parts[0].rstrip(":") in ("Rss", "Pss", "Anonymous") and out:
                out[-1][parts[0].rstrip(":")] = int(parts[1])
    return out


def peak_rss(pid: int) -> int:
    """VmHWM of /proc/<pid>/status (KiB): the highest RSS the process has had (start-up,
    translation, preparation included)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def threads(pid: int) -> Counter[str]:
    names: Counter[str] = Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/comm") as f:
            names[f.read().strip()] += 1
    return names


def where_it_goes(pid: int) -> list[tuple[str, float]]:
    """The launcher's PSS by kind of mapping (MiB): heap and anonymous mappings, file mappings
    by library (their private, relocated pages included)."""
    kinds: Counter[str] = Counter()
    for m in mappings(pid):
        name = m["name"]
        if not name or name == "[heap]":
            kinds["anonymous (Python objects and code, malloc arenas, thread stacks)"] += m.get("Pss", 0)
        elif name.startswith("["):
            kinds[name] += m.get("Pss", 0)
        else:
            kinds[pathlib.Path(name).name] += m.get("Pss", 0)
    return [(k, v / 1024) for k, v in kinds.most_common()]


def vmm_memory(pid: int) -> dict[str, float]:
    """The VMM's memory (MiB): all of it, the guest RAM it has touched (the mappings of the guest's
    size and more) and the rest, its own; VmPTE (page tables) from /proc/<pid>/status."""
    maps = mappings(pid)
    guest = [m for m in maps if m["size"] * 1024 >= GUEST_MEMORY // 2]
    values = rollup(pid)
    pte = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmPTE:"):
                pte = int(line.split()[1])
    guest_rss = sum(m.get("Rss", 0) for m in guest)
    return {"rss": values["Rss"] / 1024, "pss": values["Pss"] / 1024, "guest_rss": guest_rss / 1024,
            "own_rss": (values["Rss"] - guest_rss) / 1024,
            "own_pss": (values["Pss"] - sum(m.get("Pss", 0) for m in guest)) / 1024, "pte": pte / 1024,
            "threads": len(os.listdir(f"/proc/{pid}/task"))}


def mib(kib: float) -> str:
    return f"{kib / 1024:6.1f} MiB"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))]


class Baseline:
    """A bare process of the image's interpreter, started and measured in this run."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != b"ready":
            raise RuntimeError(f"{argv[:3]} did not start: {line!r}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


# --- the VM -----------------------------------------------------------------------------------


def real_vmm() -> tuple[str | None, str]:
    """(binary, why) of the real cloud-hypervisor, or (None, why not)."""
    binary = os.environ.get("CH_BINARY") or (str(SHARED_CH) if SHARED_CH.exists() else "")
    if not binary:
        return None, "../shared/vmm is absent and CH_BINARY is not set"
    try:
        os.close(os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC))
    except OSError as e:
        return None, f"/dev/kvm is not usable: {e.strerror}"
    if missing_tools():
        return None, str(missing_tools())
    return binary, f"the real cloud-hypervisor ({binary}) with the tiny guest of tests/guest/"


class Pod:
    """One launcher of the image's configuration with its VMM, virt-handler's two sides played
    by this process."""

    def __init__(self, venv: pathlib.Path, env: dict[str, str], vmm: str | None) -> None:
        self.root = pathlib.Path(tempfile.mkdtemp(prefix="kcf", dir="/tmp"))
        self.layout = LauncherLayout(self.root).create()
        self.vmi = make_vmi()  # a containerDisk, an emptyDisk, cloud-init; no NIC (no pod network here)
        domain = self.vmi["spec"]["domain"]
        domain["memory"]["guest"] = domain["resources"]["requests"]["memory"] = "1Gi"
        domain["devices"]["rng"] = {}
        payload = str(guest_payload()) if vmm else None
        for name in ("hypervisor-fw", "CLOUDHV.fd"):
            target = self.layout.firmware_dir / name
            if payload:
                target.symlink_to(payload)  # the tiny guest boots as the BIOS firmware
            else:
                target.write_bytes(b"\0" * 4096)
        container_disk_images(self.vmi, self.layout, size=16 << 20)
        self.recorder = NotifyRecorder(self.layout.notify_socket)
        meta = self.vmi["metadata"]
        self.launcher = LauncherProcess(self.layout, name=meta["name"], namespace=meta["namespace"],
                                        uid=meta["uid"], ch_binary=vmm or str(FAKE_CH), env=env,
                                        command=[str(venv / "bin" / "ch-launcher")])
        self.client: CmdClient | None = None

    async def start(self, *, paused: bool = False) -> None:
        """Sync until the VM runs, serve some GetDomain and a GetDomainStats. `paused`: then
        pause the VM (the tiny guest polls its serial port, so a running one keeps a little CPU
        busy; a paused VM holds the same memory)."""
        await self.recorder.start()
        self.launcher.start()
        await self.launcher.wait_ready(30.0)
        self.client = CmdClient(self.layout.cmd_socket)
        await self.client.sync(self.vmi)
        await self.recorder.wait_for_status("Running", timeout=60)
        for _ in range(50):
            await self.client.call("GetDomain")
        await self.client.get_domain_stats()
        if paused:
            await self.client.vmi_command("PauseVirtualMachine", self.vmi)
            await self.recorder.wait_for_status("Paused", timeout=30)

    @property
    def launcher_pid(self) -> int:
        return self.launcher.launcher_pid

    @property
    def vmm_pid(self) -> int | None:
        children = self.launcher.children()
        return children[0] if children else None

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        self.launcher.kill()
        await self.recorder.stop()
        shutil.rmtree(self.root, ignore_errors=True)


async def settle(seconds: float = 1.0) -> None:
    """Let the processes finish what the last calls started (release_memory after boot, ...)."""
    await asyncio.sleep(seconds)


# --- the benchmark ----------------------------------------------------------------------------


async def bench(launchers: int, clients: int, seconds: float, pause: float) -> None:
    env = image_environment()
    venv = launcher_venv(env)
    vmm, why = real_vmm()
    knobs = " ".join(f"{k}={v}" for k, v in env.items() if k not in ("PATH", "LANG"))
    print(f"ch-launcher footprint ({os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}); the image's configuration: "
          f"pip install '.[launcher]', {knobs}")
    print(f"  VMM: {why if vmm else 'the SIMULATED VMM, because ' + why}")
    python = str(venv / "bin" / "python")
    work = pathlib.Path(tempfile.mkdtemp(prefix="kcb", dir="/tmp"))
    answer = work / "answer.bin"
    pods: list[Pod] = []
    try:
        # Baselines, each measured while it runs alone with this benchmark.
        interp = Baseline([python, "-c", BARE_INTERPRETER], env)
        await settle()
        r_interp = rollup(interp.proc.pid)
        interp.stop()

        first = Pod(venv, env, vmm)
        pods.append(first)
        await first.start()
        assert first.client is not None
        reply = await first.client.call("GetDomain")
        answer.write_bytes(reply.SerializeToString())

        bare = Baseline([python, "-c", BARE_SERVER, str(work / "bare.sock"), str(answer)], env)
        floor = await asyncio.to_thread(load, str(work / "bare.sock"), clients, seconds, pause)
        await settle()
        r_bare, bare_threads = rollup(bare.proc.pid), threads(bare.proc.pid)
        bare.stop()

        # The launcher alone (with its VMM), after Sync, GetDomain and GetDomainStats.
        await settle()
        r_one, one_threads, one_kinds = rollup(first.launcher_pid), threads(first.launcher_pid), \
            where_it_goes(first.launcher_pid)
        r_monitor = rollup(first.launcher.pid)
        vm = vmm_memory(first.vmm_pid) if first.vmm_pid else None

        print("\n  memory, one launcher after Sync with its VM running (RSS / PSS / anonymous; ratio of PSS)")
        for label, r in (("bare interpreter", r_interp), ("bare grpc.aio server", r_bare), ("ch-launcher", r_one)):
            print(f"    {label:22s} {mib(r['Rss'])} {mib(r['Pss'])} {mib(r['Pss_Anon'])}   "
                  f"{r['Pss'] / r_interp['Pss']:4.1f}x interpreter, {r['Pss'] / r_bare['Pss']:4.2f}x grpc.aio")
        print(f"    its monitor (the container's first process, a `python -I -S`) {mib(r_monitor['Rss'])} "
              f"{mib(r_monitor['Pss'])} {mib(r_monitor['Pss_Anon'])}")
        print(f"    launcher's peak RSS (VmHWM: start-up, translation, preparation) "
              f"{mib(peak_rss(first.launcher_pid))}; "
              f"file-backed now {mib(r_one['Rss'] - r_one['Anonymous'])} RSS, clean pages the kernel can reclaim")
        print(f"    threads: launcher {sum(one_threads.values())} ({_names(one_threads)}); "
              f"bare grpc.aio {sum(bare_threads.values())}")
        print("    where the launcher's PSS goes: " + "; ".join(f"{k} {v:.1f}" for k, v in one_kinds if v >= 0.3))
        if vm:
            print(f"  cloud-hypervisor beside it (1 GiB / 1 vCPU, {'tiny guest running' if vmm else 'simulated'}): "
                  f"RSS {vm['rss']:.1f} MiB, PSS {vm['pss']:.1f} MiB, "
                  f"of which guest RAM touched {vm['guest_rss']:.1f} MiB; "
                  f"its own RSS {vm['own_rss']:.1f} MiB, PSS {vm['own_pss']:.1f} MiB; page tables {vm['pte']:.2f} MiB; "
                  f"{vm['threads']} threads")

        # GetDomain under load while the VM emits events, beside the bare server's floor.
        toggler = asyncio.create_task(pause_resume(first))
        try:
            under_load = await asyncio.to_thread(load, str(first.layout.cmd_socket), clients, seconds, pause)
        finally:
            toggler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await toggler
        events = len(first.recorder.events)
        print(f"\n  GetDomain, {clients} clients for {seconds:.0f} s ({pause * 1000:.0f} ms between a client's calls), "
              f"p50 / p99 / max")
        for label, samples in (("bare grpc.aio (floor)", floor), ("ch-launcher", under_load)):
            print(f"    {label:22s} {percentile(samples, 50) * 1000:6.3f} / {percentile(samples, 99) * 1000:6.3f} / "
                  f"{max(samples) * 1000:6.2f} ms   ({len(samples)} calls)")
        print(f"    p99 ratio {percentile(under_load, 99) / percentile(floor, 99):.2f}x the floor; the VM emitted "
              f"events meanwhile ({events} Domain events in all so far; target p99 <= 2 ms)")

        # N launchers side by side.
        for _ in range(launchers - 1):
            pod = Pod(venv, env, vmm)
            pods.append(pod)
            await pod.start(paused=True)
        await settle()
        per = [rollup(p.launcher_pid) for p in pods]
        pss = [r["Pss"] for r in per]
        anon = [r["Pss_Anon"] for r in per]
        print(f"\n  {launchers} launchers side by side, each with its VM (all but the first paused): "
              f"PSS per launcher mean {mib(statistics.mean(pss))}, "
              f"max {mib(max(pss))} (the lone one above: {mib(r_one['Pss'])}; "
              f"{statistics.mean(pss) / r_one['Pss']:.2f}x); anonymous mean {mib(statistics.mean(anon))}")
        vms = [vmm_memory(p.vmm_pid) for p in pods if p.vmm_pid]
        if vms:
            print(f"    cloud-hypervisor per VM: PSS mean {statistics.mean(v['pss'] for v in vms):.1f} MiB, "
                  f"own PSS mean {statistics.mean(v['own_pss'] for v in vms):.1f} MiB")

        if vmm:
            print("\n  cloud-hypervisor alone, tiny guest running: own RSS / guest RAM touched / page tables / threads")
            for vcpus, disks, memory in ((1, 0, 1), (1, 8, 1), (8, 1, 1), (1, 1, 4)):
                v = await asyncio.to_thread(vmm_alone, vmm, vcpus, disks, memory << 30)
                print(f"    {vcpus} vCPU, {disks} disks, {memory} GiB:   {v['own_rss']:5.1f} MiB / "
                      f"{v['guest_rss']:4.1f} MiB / {v['pte']:4.2f} MiB / {v['threads']}")

        attribution = await asyncio.to_thread(subprocess.run, [python, "-c", ATTRIBUTION, json.dumps(IMPORT_STEPS)],
                                              env=env, capture_output=True, text=True, check=True)
        steps = json.loads(attribution.stdout)
        print("\n  import attribution (anonymous memory each step adds, image interpreter):")
        previous = 0
        for label, kib, modules in steps:
            print(f"    {label:46s} +{(kib - previous) / 1024:5.2f} MiB  ({modules} modules)")
            previous = kib
        print(f"    {'all of them':46s}  {previous / 1024:5.2f} MiB")
    finally:
        for pod in pods:
            await pod.close()
        shutil.rmtree(work, ignore_errors=True)


def vmm_alone(binary: str, vcpus: int, disks: int, memory: int) -> dict[str, float]:
    """Boot the tiny guest on a VMM of its own with `vcpus`, `disks` (sparse raw images) and
    `memory` bytes, and measure it once it runs. (The tiny guest never drives its virtio
    devices, so their queue threads do not start.)"""
    from ch_launcher.ch.process import VmmProcess

    d = tempfile.mkdtemp(prefix="kcv", dir="/tmp")
    vmm = VmmProcess.spawn(binary, api_socket=f"{d}/api.sock", event_monitor=f"{d}/events", log_file=f"{d}/ch.log")
    try:
        vmm.wait_ready(10.0)
        config: dict[str, Any] = {
            "payload": {"firmware": str(guest_payload())}, "cpus": {"boot_vcpus": vcpus, "max_vcpus": vcpus},
            "memory": {"size": memory}, "serial": {"mode": "Socket", "socket": f"{d}/serial"},
            "console": {"mode": "Off"}, "rng": {"src": "/dev/urandom"}, "disks": []}
        for i in range(disks):
            with open(f"{d}/disk{i}.img", "wb") as f:
                f.truncate(16 << 20)
            config["disks"].append({"path": f"{d}/disk{i}.img"})
        vmm.client.create(config)
        vmm.client.boot()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(os.listdir(f"/proc/{vmm.pid}/task")) < 2 + vcpus:
            time.sleep(0.1)
        time.sleep(1.0)  # the guest prints its marker and waits on its serial port
        return vmm_memory(vmm.pid)
    finally:
        vmm.terminate()
        vmm.close()
        shutil.rmtree(d, ignore_errors=True)


def _names(counts: Counter[str]) -> str:
    return ", ".join(f"{name} x{n}" if n > 1 else name for name, n in counts.most_common())


async def pause_resume(pod: Pod, every: float = 0.25) -> None:
    """Pause and resume the VM over and over (each a Domain event to virt-handler)."""
    assert pod.client is not None
    while True:
        await pod.client.vmi_command("PauseVirtualMachine", pod.vmi)
        await asyncio.sleep(every)
        await pod.client.vmi_command("UnpauseVirtualMachine", pod.vmi)
        await asyncio.sleep(every)


def load(socket_path: str, clients: int, seconds: float, pause: float) -> list[float]:
    done = subprocess.run([sys.executable, "-c", LOAD_CLIENT, socket_path, str(clients), str(seconds), str(pause)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=seconds + 60, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the load client failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--launchers", type=int, default=50, help="launchers side by side for the per-launcher PSS")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each GetDomain load run")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds between one client's GetDomain calls")
    args = parser.parse_args()
    asyncio.run(bench(max(1, args.launchers), args.clients, args.seconds, args.pause))
    return 0


if __name__ == "__main__":
    sys.exit(main())

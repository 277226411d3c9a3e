"""Admission webhook throughput and latency, against a bare TLS echo on the same stack.

In one run on this machine:
  1. `ch-admission serve` (a real child process, certificates made here) answers /validate
     for a typical annotated VMI (KubeVirt's vmi-fedora with the selection);
  2. an echo server on the same stack (aiohttp + the same reloading TLS context, one process)
     answers the same body with itself: the cost of HTTPS + HTTP alone, the baseline;
  3. `wrk` (C, its own process: the load generator is not the bottleneck) drives each with
     16 keep-alive connections, then with 1 connection (reviews one after another).

Prints reviews/s, p50/p99 for both and the ratios. Targets (issue 6): >= 1,000 reviews/s at 16
connections and p99 < 5 ms sequential. `wrk` comes from Debian (`make bench` installs it).
Usage: python bench/admission.py [--seconds N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from admission.certs import make_ca, make_serving  # noqa: E402

FEDORA = REPO.parent / "shared" / "reference" / "data" / "kubevirt-examples" / "vmi-fedora.yaml"

LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local f = io.open("%s", "rb")
wrk.body = f:read("*a")
f:close()
done = function(summary, latency, requests)
  io.write(string.format("RESULT %%d %%d %%d %%d %%d %%d\\n", summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(99), summary.errors.status, summary.errors.timeout))
end
"""


def typical_vmi() -> dict:
    import yaml
    if FEDORA.exists():
        vmi = yaml.safe_load(FEDORA.read_text())
    else:  # ../shared absent: an equivalent VMI
        vmi = {"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "metadata": {"name": "vmi-fedora"},
               "spec": {"domain": {"devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}],
                                               "interfaces": [{"name": "default", "masquerade": {}}], "rng": {}},
                                   "memory": {"guest": "1024M"}, "resources": {}},
                        "networks": [{"name": "default", "pod": {}}],
                        "volumes": [{"name": "containerdisk", "containerDisk": {"image": "example.org/fedora"}}]}}
    vmi["metadata"].setdefault("annotations", {})["kubevirt-ch.io/hypervisor"] = "cloud-hypervisor"
    vmi["metadata"]["namespace"] = "default"
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "6c0bf2d7-1f9a-4c6e-9d1b-3c1a5b2e7f10",
        "kind": {"group": "kubevirt.io", "version": "v1", "kind": "VirtualMachineInstance"},
        "resource": {"group": "kubevirt.io", "version": "v1", "resource": "virtualmachineinstances"},
        "name": "vmi-fedora", "namespace": "default", "operation": "CREATE",
        "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": vmi, "oldObject": None, "dryRun": False}}


def echo_server(port_file: str, cert: str, key: str) -> None:
    """The baseline: same aiohttp + TLS stack, a handler that returns the body it read."""
    from aiohttp import web

    from admission.tls import ReloadingTLS

    async def echo(request: web.Request) -> web.Response:
        return web.Response(body=await request.read(), content_type="application/json")

    async def main() -> None:
        tls = ReloadingTLS(cert, key)
        app = web.Application(client_max_size=4 << 20)
        app.router.add_post("/echo", echo)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.base, backlog=1024)
        await site.start()
        # a few bytes, once, before any request: nothing waits on the loop yet
        pathlib.Path(port_file).write_text(str(next(iter(runner.addresses))[1]))  # noqa: ASYNC240
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        await runner.cleanup()

    asyncio.run(main())


def wait_port_file(path: pathlib.Path, proc: subprocess.Popen, what: str) -> int:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text().strip()):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start")
        time.sleep(0.05)
    return int(path.read_text())


def start_admission(tmp: pathlib.Path, cert: str, key: str) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    proc = subprocess.Popen([sys.executable, "-m", "admission.cli", "serve", "--port", "0", "--address", "127.0.0.1",
                             "--tls-cert-file", cert, "--tls-private-key-file", key, "--log-level", "warning",
                             "--config", str(REPO / "admission" / "config.example.yaml")],
                            cwd=REPO, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    # with --log-level warning the "serving" line is not printed: find the port from /proc
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        port = listening_port(proc.pid)
        if port:
            return proc, port
        if proc.poll() is not None:
            raise SystemExit("ch-admission did not start: " + (proc.stderr.read() if proc.stderr else ""))
        time.sleep(0.05)
    raise SystemExit("ch-admission did not start listening")


def listening_port(pid: int) -> int | None:
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        for line in pathlib.Path(f"/proc/{pid}/net/tcp").read_text().splitlines()[1:]:
            parts = line.split()
            if parts[3] == "0A" and parts[9] in inodes:  # LISTEN
                return int(parts[1].split(":")[1], 16)
    except OSError:
        return None
    return None


def wrk(url: str, script: str, connections: int, threads: int, seconds: int) -> dict[str, float]:
    out = subprocess.run(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--timeout", "5s",
                          "-s", script, url], capture_output=True, text=True, timeout=seconds + 60, check=False)
    m = re.search(r"RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out.stdout)
    if not m:
        raise SystemExit(f"wrk failed: {out.stdout}\n{out.stderr}")
    requests, duration_us, p50, p99, status_errors, timeouts = map(int, m.groups())
    if status_errors or timeouts:
        raise SystemExit(f"wrk saw {status_errors} non-2xx answers and {timeouts} timeouts against {url}")
    return {"rps": requests / (duration_us / 1e6), "p50_ms": p50 / 1000, "p99_ms": p99 / 1000, "n": requests}


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="duration of each load phase (default 10)")
    parser.add_argument("--echo-server", nargs=3, metavar=("PORT_FILE", "CERT", "KEY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.echo_server:
        echo_server(*args.echo_server)
        return 0
    if shutil.which("wrk") is None:
        print("wrk is not installed: run `make bench` (installs Debian's wrk) or apt-get install wrk", file=sys.stderr)
        return 1

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="kc-bench-"))
    procs: list[subprocess.Popen] = []
    try:
        ca, ca_key = make_ca("bench CA")
        cert, key = make_serving(ca, ca_key, ["localhost", "127.0.0.1"])
        (tmp / "tls.crt").write_bytes(cert)
        (tmp / "tls.key").write_bytes(key)
        body = json.dumps(typical_vmi()).encode()
        (tmp / "review.json").write_bytes(body)
        script = tmp / "post.lua"
        script.write_text(LUA % (tmp / "review.json"))

        admission, port = start_admission(tmp, str(tmp / "tls.crt"), str(tmp / "tls.key"))
        procs.append(admission)
        echo = subprocess.Popen([sys.executable, __file__, "--echo-server", str(tmp / "echo.port"),
                                 str(tmp / "tls.crt"), str(tmp / "tls.key")], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
        procs.append(echo)
        echo_port = wait_port_file(tmp / "echo.port", echo, "echo server")

        # sanity: the review is answered, allowed, by the real rules
        check = subprocess.run(["wrk", "-t1", "-c1", "-d1s", "-s", str(script), f"https://127.0.0.1:{port}/validate"],
                               capture_output=True, text=True, timeout=60, check=False)
        if "RESULT" not in check.stdout:
            raise SystemExit(f"warm-up failed: {check.stdout} {check.stderr}")
        wrk(f"https://127.0.0.1:{echo_port}/echo", str(script), 1, 1, 1)  # warm-up

        s = args.seconds
        review16 = wrk(f"https://127.0.0.1:{port}/validate", str(script), 16, 2, s)
        echo16 = wrk(f"https://127.0.0.1:{echo_port}/echo", str(script), 16, 2, s)
        review1 = wrk(f"https://127.0.0.1:{port}/validate", str(script), 1, 1, s)
        echo1 = wrk(f"https://127.0.0.1:{echo_port}/echo", str(script), 1, 1, s)
    finally:
        for p in procs:
            stop(p)
        shutil.rmtree(tmp, ignore_errors=True)

    cores = os.cpu_count()
    print(f"admission benchmark: /validate of an annotated vmi-fedora ({len(body)} bytes), TLS 1.3, "
          f"keep-alive, wrk, {s} s per phase, {cores} CPUs (shared: figures are noisy)")
    print(f"{'':28} {'reviews/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for label, r in (("16 connections: /validate", review16), ("16 connections: TLS echo", echo16),
                     ("sequential:     /validate", review1), ("sequential:     TLS echo", echo1)):
        print(f"{label:28} {r['rps']:10.0f} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f}")
    print(f"ratio /validate vs echo, 16 connections: throughput {review16['rps'] / echo16['rps']:.2f}x, "
          f"p99 {review16['p99_ms'] / echo16['p99_ms']:.2f}x")
    print(f"ratio /validate vs echo, sequential: p99 {review1['p99_ms'] / echo1['p99_ms']:.2f}x")
    ok_rps = review16["rps"] >= 1000
    ok_p99 = review1["p99_ms"] < 5
    print(f"targets: >= 1000 reviews/s at 16 connections: {'met' if ok_rps else 'NOT met'} "
          f"({review16['rps']:.0f}); sequential p99 < 5 ms: {'met' if ok_p99 else 'NOT met'} "
          f"({review1['p99_ms']:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

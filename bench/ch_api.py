"""Round-trip time of `GET vm.info` through CloudHypervisorClient vs a raw socket request.

Both go to the same simulated VMM (tests/fakes/fake_cloud_hypervisor.py) in the same run, both
open one connection per request (as the client does, CH allowing only 10), so the ratio is the
client's own overhead: http.client, JSON and pydantic parsing, the lock.
Prints p50/p99 in microseconds and the ratio of medians. Usage: python bench/ch_api.py [N]
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from ch_launcher.ch.events import open_event_fifo  # noqa: E402
from ch_launcher.ch.process import VmmProcess  # noqa: E402

FAKE = os.path.join(REPO, "tests", "fakes", "fake_cloud_hypervisor.py")
REQUEST = b"GET /api/v1/vm.info HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n"


def raw_info(path: str) -> bytes:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        s.sendall(REQUEST)
        data = b""
        while True:
            head_end = data.find(b"\r\n\r\n")
            if head_end >= 0:
                length = int(data.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                if len(data) >= head_end + 4 + length:
                    return data
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("connection closed early")
            data += chunk
    finally:
        s.close()


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> int:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
    d = tempfile.mkdtemp(prefix="kcb", dir="/tmp")
    fifo = open_event_fifo(os.path.join(d, "events"))
    proc = VmmProcess.spawn(FAKE, api_socket=os.path.join(d, "api.sock"), event_monitor=fifo.path,
                            log_file=os.path.join(d, "log"), verbose=False)  # fmt: skip
    try:
        proc.wait_ready()
        client = proc.client
        firmware = os.path.join(d, "fw")
        with open(firmware, "wb") as f:
            f.write(b"fw")
        client.create({"payload": {"firmware": firmware}, "console": {"mode": "Off"}})
        client.boot()
        for _ in range(100):  # warm-up both paths
            client.info()
            raw_info(proc.api_socket)
        fifo.read_available()
        client_t, raw_t = [], []
        # Interleave so both see the same machine load (the machine is shared and noisy).
        for i in range(n):
            t0 = time.perf_counter()
            client.info()
            t1 = time.perf_counter()
            raw_info(proc.api_socket)
            t2 = time.perf_counter()
            client_t.append(t1 - t0)
            raw_t.append(t2 - t1)
            if i % 500 == 0:
                fifo.read_available()
        c50, c99 = percentiles(client_t)
        r50, r99 = percentiles(raw_t)
        print(f"vm.info round trip over {n} calls against the simulated VMM (one connection per call)")
        print(f"  client (http.client + pydantic):       p50 {c50 * 1e6:8.1f} us   p99 {c99 * 1e6:8.1f} us")
        print(f"  raw socket request (baseline):           p50 {r50 * 1e6:8.1f} us   p99 {r99 * 1e6:8.1f} us")
        print(f"  client overhead ratio (p50 client / p50 raw): {c50 / r50:.2f}x   (p99: {c99 / r99:.2f}x)")
    finally:
        proc.terminate()
        proc.close()
        fifo.close()
        shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

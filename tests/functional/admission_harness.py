"""Helpers for the admission functional tests: certificates made in the test, a real
`ch-admission serve` child process, and an HTTPS client that trusts the test CA."""

from __future__ import annotations

import contextlib
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Self

import requests

from admission.certs import make_ca, make_serving

REPO = pathlib.Path(__file__).resolve().parents[2]
CONFIG = REPO / "admission" / "config.example.yaml"


def make_tls(directory: pathlib.Path, names: Sequence[str] = ("localhost", "127.0.0.1"),
             prefix: str = "") -> dict[str, pathlib.Path]:
    """A CA and a serving pair for `names`, written as <prefix>ca.crt, <prefix>tls.crt, <prefix>tls.key."""
    ca_cert, ca_key = make_ca(f"test CA {prefix}")
    cert, key = make_serving(ca_cert, ca_key, list(names))
    paths = {"ca": directory / f"{prefix}ca.crt", "cert": directory / f"{prefix}tls.crt",
             "key": directory / f"{prefix}tls.key", "ca_key": directory / f"{prefix}ca.key"}
    paths["ca"].write_bytes(ca_cert)
    paths["ca_key"].write_bytes(ca_key)
    paths["cert"].write_bytes(cert)
    paths["key"].write_bytes(key)
    return paths


class ServerProcess:
    """A server command in its own process group, its stderr kept in `log`; the port comes from
    its "serving https://ADDR:PORT" line. `stop()` kills the whole group."""

    def __init__(self, cmd: Sequence[str], env: dict[str, str], cwd: pathlib.Path = REPO):
        self.cmd, self.env, self.cwd = list(cmd), env, cwd
        self.proc: subprocess.Popen[str] | None = None
        self.port = 0
        self.log: list[str] = []
        self._ready = threading.Event()
        self._until = "serving https://"
        self._pumping: threading.Thread | None = None

    def start(self, timeout: float = 60.0, until: str = "serving https://") -> Self:
        """Start and wait for a log line containing `until` (by default: serving, port known).
        RuntimeError with the log if the process exits or `timeout` passes first."""
        self._until = until
        self.proc = subprocess.Popen(self.cmd, cwd=self.cwd, env=self.env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, start_new_session=True)
        self._pumping = threading.Thread(target=self._pump, daemon=True)
        self._pumping.start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{self.cmd[0]} did not start:\n" + "\n".join(self.log))
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if "serving https://" in line:
                self.port = int(line.split("serving https://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
            if self._until in line:
                self._ready.set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(10)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        if self._pumping is not None:
            self._pumping.join(10)  # every line of stderr is in self.log once stop() returns
        return self.proc.returncode


class AdmissionServer(ServerProcess):
    """`python -m admission.cli serve ... ARGS` on a free port of 127.0.0.1, outside any cluster."""

    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None):
        full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
        full_env.pop("KUBERNETES_SERVICE_HOST", None)
        super().__init__([sys.executable, "-m", "admission.cli", "serve", "--port", "0", "--address", "127.0.0.1",
                          *args], full_env)


def client(ca: pathlib.Path) -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # REQUESTS_CA_BUNDLE would otherwise override `verify`
    session.verify = str(ca)
    return session


def post_review(session: requests.Session, url: str, body: Any, path: str = "/validate") -> dict[str, Any]:
    """POST an AdmissionReview; assert the HTTP envelope is right and return `response`."""
    r = session.post(url + path, json=body, timeout=10)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == body["request"]["uid"]
    return answer["response"]

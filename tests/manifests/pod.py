"""Run the Deployment's container as a local process, the way the kubelet would run it.

Each volumeMount becomes a temporary directory (ConfigMap and Secret volumes filled with their
keys, emptyDirs empty), the container's paths in `args` are rewritten to those directories,
`env` is set (downward-API fields resolved from the pod), and `command[0]` (`/usr/bin/X` in the
image, a symlink to the virtualenv's console script) is the console script beside this
interpreter. Extra flags are appended: argparse keeps the last value, so the Deployment's own
flags stay as written and only what cannot hold outside a cluster (port, address, kubeconfig) is
overridden. The process gets its own process group and is killed with it.
"""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from tests.manifests.render import REPO


class Container:
    def __init__(self, deployment: dict[str, Any], objects: list[dict[str, Any]], root: pathlib.Path,
                 extra_args: list[str], secrets: dict[str, dict[str, bytes]] | None = None):
        pod = deployment["spec"]["template"]["spec"]
        (self.spec,) = pod["containers"]
        self.root = root
        self.mounts: dict[str, pathlib.Path] = {}
        volumes = {v["name"]: v for v in pod["volumes"]}
        configmaps = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ConfigMap"}
        for m in self.spec.get("volumeMounts", []):
            host = root / m["name"]
            host.mkdir(parents=True)
            volume = volumes[m["name"]]
            if "configMap" in volume:
                for key, text in configmaps[volume["configMap"]["name"]]["data"].items():
                    (host / key).write_text(text)
            elif "secret" in volume:
                for key, data in (secrets or {})[volume["secret"]["secretName"]].items():
                    (host / key).write_bytes(data)
            else:
                assert set(volume) <= {"name", "emptyDir"}, f"volume {m['name']}: unsupported here"
            self.mounts[m["mountPath"]] = host
        self.args = [self._host_path(a) for a in self.spec["args"]] + extra_args
        namespace = deployment["metadata"]["namespace"]
        self.env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self.env["PYTHONPATH"] = str(REPO)
        for e in self.spec.get("env", []):
            if "value" in e:
                self.env[e["name"]] = e["value"]
            else:
                assert e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace", e
                self.env[e["name"]] = namespace
        command = self.spec["command"]
        assert command[0].startswith("/usr/bin/")
        self.command = [str(pathlib.Path(sys.executable).parent / command[0].removeprefix("/usr/bin/")),
                        *command[1:]]
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self.port = 0
        self._ready = threading.Event()

    def _host_path(self, arg: str) -> str:
        """`--flag=/mount/path/file` or `/mount/path/file` with the mount's directory on this host."""
        flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        for mount, host in sorted(self.mounts.items(), key=lambda kv: -len(kv[0])):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                value = str(host) + value[len(mount.rstrip("/")):]
                break
        return f"{flag}{eq}{value}" if eq else (value if not flag else arg)

    def start(self, timeout: float = 60.0) -> Container:
        self.proc = subprocess.Popen([*self.command, *self.args], cwd=self.root, env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        threading.Thread(target=self._pump, daemon=True).start()
        deadline = time.monotonic() + timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the container's command did not start serving:\n" + "\n".join(self.log))
        return self

    def _pump(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            if "serving https://" in line and not self._ready.is_set():
                self.port = int(line.split("serving https://", 1)[1].split(" ", 1)[0].rsplit(":", 1)[1])
                self._ready.set()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)

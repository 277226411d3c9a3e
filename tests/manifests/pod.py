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
import sys
from typing import Any

from tests.functional.admission_harness import ServerProcess
from tests.manifests.render import REPO


class Container(ServerProcess):
    """The Deployment's only container as a local process (ServerProcess: start, port, log, stop)."""

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
        super().__init__([*self.command, *self.args], self.env, cwd=root)

    def _host_path(self, arg: str) -> str:
        """`--flag=/mount/path/file` or `/mount/path/file` with the mount's directory on this host."""
        flag, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
        for mount, host in sorted(self.mounts.items(), key=lambda kv: -len(kv[0])):
            if value == mount or value.startswith(mount.rstrip("/") + "/"):
                value = str(host) + value[len(mount.rstrip("/")):]
                break
        return f"{flag}{eq}{value}" if eq else (value if not flag else arg)

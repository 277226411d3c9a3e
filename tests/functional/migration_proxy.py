"""A stand-in of virt-handler's migration proxies (`kubevirt pkg/virt-handler/migration-proxy/
migration-proxy.go@d923fdb815cd`), behaving as upstream's do, for the launcher migration stories.

- **Target listeners** (`StartTargetListener(key, targetUnixFiles)`): one TCP listener per unix
  file, on a random port (upstream binds the node's zero address; here loopback, as tests must),
  each dialling its unix file inside the target pod for every connection it accepts.
  `GetTargetListenerPorts(key)` maps each TCP port to the migration port its file names
  (`<key>-49152-source.sock` → 49152, `virtqemud-sock` → 0).
- **Source listeners** (`StartSourceListener(key, address, destSrcPortMap, baseDir)`): for each
  entry, a unix listener at `SourceUnixFile(baseDir, ConstructProxyKey(key, srcPort))` =
  `<baseDir>/migrationproxy/<key>[-<port>]-source.sock`, owned by the pod's user (upstream's
  `UnsafeSetFileOwnership`), dialling `<address>:<destPort>` for every connection.
  `StopSourceListener` closes the listeners and removes the files.
- **Connections** (`handleConnection`): dial the other side, copy both ways; as soon as *either*
  copy ends, close the accepted (inbound) socket and return. The outbound socket is never closed
  there (Go's finaliser closes it some time later): it stays open here until `close()`. So a
  close travels from the target pod towards the source pod at once, but not the other way.
- No TLS (upstream's is optional: `disableTLS`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from pathlib import Path

DIRECT_PORT = 49152
BLOCK_PORT = 49153
PORTS = (DIRECT_PORT, BLOCK_PORT)


def construct_proxy_key(uid: str, port: int) -> str:
    return f"{uid}-{port}" if port else uid


def source_unix_file(base_dir: str | os.PathLike[str], key: str) -> Path:
    return Path(base_dir) / "migrationproxy" / f"{key}-source.sock"


class _Proxy:
    """One listener and the connections it accepted."""

    def __init__(self, listener: socket.socket, dial: tuple[int, object], owner: ProxyManager) -> None:
        self.listener = listener
        self.family, self.target = dial
        self.owner = owner
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                inbound, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(inbound,), daemon=True).start()

    def _handle(self, inbound: socket.socket) -> None:
        outbound = socket.socket(self.family, socket.SOCK_STREAM)
        try:
            outbound.connect(self.target)
        except OSError:
            # "unable to create outbound leg of proxy to host": the inbound side is closed
            outbound.close()
            inbound.close()
            return
        self.owner.leaked.append(outbound)  # never closed by handleConnection
        done = threading.Event()

        def copy(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while True:
                    data = src.recv(1 << 20)
                    if not data:
                        break
                    dst.sendall(data)
            done.set()

        threading.Thread(target=copy, args=(outbound, inbound), daemon=True).start()
        threading.Thread(target=copy, args=(inbound, outbound), daemon=True).start()
        done.wait()
        with contextlib.suppress(OSError):
            inbound.shutdown(socket.SHUT_RDWR)
        inbound.close()

    def stop(self) -> None:
        self.stopped.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()


class ProxyManager:
    """virt-handler's `migrationProxyManager`: target proxies on one node, source proxies on the
    other (both in this process: the tests run both nodes on one machine)."""

    def __init__(self, *, pod_uid: int | None = None) -> None:
        self.pod_uid = pod_uid
        self.targets: dict[str, list[tuple[_Proxy, int, str]]] = {}
        self.sources: dict[str, list[tuple[_Proxy, Path]]] = {}
        self.leaked: list[socket.socket] = []

    # --- target node -----------------------------------------------------------------------------

    def start_target_listener(self, key: str, target_unix_files: list[str]) -> None:
        if key in self.targets:
            return
        proxies = []
        for path in target_unix_files:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            port = listener.getsockname()[1]
            proxies.append((_Proxy(listener, (socket.AF_UNIX, path), self), port, path))
        self.targets[key] = proxies

    def get_target_listener_ports(self, key: str) -> dict[str, int]:
        """`GetTargetListenerPorts`: TCP port (as a string) -> the migration port of its file."""
        ports: dict[str, int] = {}
        for _, port, path in self.targets.get(key, []):
            ports[str(port)] = next((p for p in PORTS if construct_proxy_key(key, p) in path), 0)
        return ports

    def stop_target_listener(self, key: str) -> None:
        for proxy, _, _ in self.targets.pop(key, []):
            proxy.stop()

    # --- source node -----------------------------------------------------------------------------

    def start_source_listener(self, key: str, target_address: str, dest_src_port_map: dict[str, int],
                              base_dir: str | os.PathLike[str]) -> None:
        if key in self.sources:
            return
        proxies = []
        for dest, src in dest_src_port_map.items():
            path = source_unix_file(base_dir, construct_proxy_key(key, src))
            path.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(path))
            listener.listen(16)
            if self.pod_uid is not None:
                os.chown(path, self.pod_uid, self.pod_uid)
                os.chown(path.parent, self.pod_uid, self.pod_uid)
            proxies.append((_Proxy(listener, (socket.AF_INET, (target_address, int(dest))), self), path))
        self.sources[key] = proxies

    def get_source_listener_files(self, key: str) -> list[str]:
        return [str(path) for _, path in self.sources.get(key, [])]

    def stop_source_listener(self, key: str) -> None:
        for proxy, path in self.sources.pop(key, []):
            proxy.stop()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def close_leaked(self) -> None:
        """What Go's finaliser eventually does: close the outbound legs handleConnection left open."""
        for s in self.leaked:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        self.leaked.clear()

    def close(self) -> None:
        """Teardown: every listener, and the outbound legs upstream leaves to the finaliser."""
        for key in list(self.targets):
            self.stop_target_listener(key)
        for key in list(self.sources):
            self.stop_source_listener(key)
        for s in self.leaked:
            with contextlib.suppress(OSError):
                s.close()
        self.leaked.clear()

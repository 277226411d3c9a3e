"""Client of Cloud Hypervisor's REST API over its unix socket (`--api-socket path=`).

One method per endpoint, each a thin line over `_call`. Facts this client relies on
(cloud-hypervisor.md §2-§4, from `vmm/src/api/http/mod.rs@v53.0` and micro_http):

- The VMM serves **one request at a time**, and a long call stalls every other call. So each
  client serialises its calls through a lock shared by every client of the same socket path in
  this process, and a caller waiting for that lock gives up after its own timeout.
- At most 10 connections are accepted; an idle keep-alive connection holds one. So every call
  opens its own connection and closes it afterwards.
- Request bodies are read only by `Content-Length`: http.client sends it for every body, and
  `Content-Length: 0` for a bodyless PUT.
- A 204 has no body and no body headers; `vmm.shutdown` answers 200 with an empty body; `vm.add-*`
  answers 200 `PciDeviceInfo` on a running VM and 204 on a created one (cold add). Any 2xx is a
  success, with or without a body, and only answers that are used are parsed.
- micro_http frames every answer (`Content-Length`, or a 204 without a body). An answer without
  either, on a connection the server keeps open, is read only until it holds one JSON value, and
  an action's not at all (`api_transport.read_body`), so it does not wait for the timeout.

Errors are typed (`ChApiError` and five subclasses, in `ch.api_errors` and re-exported here) and
carry the VMM's error chain.

The client is blocking; the launcher calls it from a worker thread. It never retries a request
(a retried PUT could act twice). The transport (`ch.api_transport`) is the standard library's
`http.client` on an `AF_UNIX` socket: one request at a time over a local socket needs no
pooling, proxies, cookies or encodings, and no third-party HTTP stack in every launcher's memory.
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import socket
from typing import Any, TypeVar

from ch_launcher.jsonmodel import DecodeError, Record, decode, encode

from .api_errors import (  # re-exported: callers catch them from here
    ChApiError,
    Conflict,
    InternalError,
    InvalidRequest,
    VmmUnavailable,
    VmNotCreated,
    error_for,
    parse_error_body,
)
from .api_transport import UnixConnection, lock_for, read_body
from .vmconfig import DeviceConfig, DiskConfig, NetConfig, PciDeviceInfo, VmConfig, VmInfo, VmmPingResponse, VsockConfig

API_ROOT = "/api/v1"
log = logging.getLogger(__name__)
_M = TypeVar("_M", bound=Record)

__all__ = ["API_ROOT", "ChApiError", "CloudHypervisorClient", "Conflict", "InternalError", "InvalidRequest",
           "VmNotCreated", "VmmUnavailable", "error_for", "parse_error_body"]


# --- the client -----------------------------------------------------------------------------


def _body(obj: Record | dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None or isinstance(obj, dict):
        return obj
    return encode(obj)


def _given(**fields: Any) -> dict[str, Any]:
    """The fields that are not None: an omitted field takes the VMM's own default."""
    return {k: v for k, v in fields.items() if v is not None}


class CloudHypervisorClient:
    """Blocking client of one VMM's API socket.

    `timeout` (seconds) bounds every call: waiting for the per-VMM lock, connecting, and each
    read of the answer; every method takes `timeout=` to override it for one call (e.g. a long
    `vm.boot` with prefault). On success a method returns the parsed answer (or None); on failure
    it raises a `ChApiError` subclass and the VMM is in whatever state that error implies
    (nothing changed for `Conflict`/`InvalidRequest`/`VmNotCreated`; unknown after a timeout).
    """

    def __init__(self, socket_path: str, timeout: float = 5.0) -> None:
        self.socket_path = str(socket_path)
        self.timeout = timeout
        self.version: str | None = None  # from the last successful ping()
        self._lock = lock_for(self.socket_path)

    # --- plumbing ---------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        endpoint: str,
        body: dict[str, Any] | None = None,
        timeout: float | None = None,
        *,
        want_body: bool = True,
    ) -> tuple[int, bytes]:
        """One request on its own connection: (status, body) of a success, else a ChApiError.
        `want_body=False`: a success's body is not needed (an action), so an unframed one is
        not waited for (`read_body`)."""
        t = self.timeout if timeout is None else timeout
        if not self._lock.acquire(timeout=t):
            raise VmmUnavailable(
                endpoint,
                None,
                [],
                f"another request to the VMM at {self.socket_path} was still in progress after {t:g} s",
            )
        try:
            data = None
            headers = {"Accept": "application/json", "User-Agent": "kubevirt-ch"}
            if body is not None:
                data = json.dumps(body, separators=(",", ":")).encode()
                headers["Content-Type"] = "application/json"
            # One connection per request: CH allows only 10, and idle ones count.
            conn = UnixConnection(self.socket_path, t)
            try:
                conn.request(method, f"{API_ROOT}/{endpoint}", body=data, headers=headers)
                resp = conn.getresponse()
                status = resp.status
                content = read_body(resp, want=want_body or status >= 300)
            except (OSError, http.client.HTTPException) as exc:
                raise self._unavailable(endpoint, t, exc) from exc
            finally:
                conn.close()
        finally:
            self._lock.release()
        if status >= 300:
            raise error_for(endpoint, status, content)
        return status, content

    def _unavailable(self, endpoint: str, t: float, exc: Exception) -> VmmUnavailable:
        path = self.socket_path
        if isinstance(exc, (socket.timeout, TimeoutError)):
            why = f"no answer from the VMM within {t:g} s"
        elif isinstance(exc, FileNotFoundError) or getattr(exc, "errno", None) == errno.ENOENT:
            why = f"API socket {path} does not exist (VMM not started, or exited)"
        elif isinstance(exc, ConnectionRefusedError):
            why = f"connection refused on {path} (nothing listening: VMM exited or not started)"
        elif isinstance(exc, (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected,
                              http.client.IncompleteRead)):
            why = f"connection to {path} reset or closed before an answer (VMM exited?)"
        else:
            why = f"cannot talk to the VMM at {path}: {exc}"
        return VmmUnavailable(endpoint, None, [], why)

    def _json(self, endpoint: str, status: int, content: bytes) -> Any:
        try:
            return json.loads(content)
        except ValueError as exc:
            raise InternalError(endpoint, status, [], f"unparseable answer {content[:200]!r}") from exc

    def _model(self, model: type[_M], endpoint: str, status: int, content: bytes) -> _M:
        try:
            return decode(model, self._json(endpoint, status, content))
        except DecodeError as exc:
            raise InternalError(endpoint, status, [], f"unexpected answer: {exc}") from exc

    def _put(self, endpoint: str, body: Any = None, timeout: float | None = None) -> None:
        self._call("PUT", endpoint, _body(body), timeout, want_body=False)

    def _add(self, endpoint: str, config: Any, timeout: float | None) -> PciDeviceInfo | None:
        status, content = self._call("PUT", endpoint, _body(config), timeout)
        if status == 204 or not content.strip():
            return None  # cold add into the config of a created (not booted) VM
        try:
            return self._model(PciDeviceInfo, endpoint, status, content)
        except InternalError as e:  # the VMM said it added the device: that stands
            log.warning("%s: the device was added (HTTP %d), but the answer does not say where: %s",
                        endpoint, status, e.detail)
            return None

    def close(self) -> None:
        """Nothing to release: each call opens and closes its own connection. The client stays usable."""

    def __enter__(self) -> CloudHypervisorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- VMM --------------------------------------------------------------------------------

    def ping(self, *, timeout: float | None = None) -> VmmPingResponse:
        """`GET vmm.ping`; records `self.version` (e.g. "53.0.0")."""
        status, content = self._call("GET", "vmm.ping", None, timeout)
        pong = self._model(VmmPingResponse, "vmm.ping", status, content)
        self.version = pong.version
        return pong

    def shutdown_vmm(self, *, timeout: float | None = None) -> None:
        """`PUT vmm.shutdown`: deletes the VM and makes the process exit (answer 200 first)."""
        self._put("vmm.shutdown", None, timeout)

    # --- VM lifecycle -----------------------------------------------------------------------

    def create(self, config: VmConfig | dict[str, Any], *, timeout: float | None = None) -> None:
        """`PUT vm.create`: stores the config. Not validated until `boot()` (CH defers it)."""
        self._put("vm.create", config, timeout)

    def boot(self, *, timeout: float | None = None) -> None:
        """`PUT vm.boot`: returns once the vCPUs run; config errors surface here."""
        self._put("vm.boot", None, timeout)

    def info(self, *, timeout: float | None = None) -> VmInfo:
        """`GET vm.info`: state and stored config; `VmNotCreated` before `vm.create`."""
        status, content = self._call("GET", "vm.info", None, timeout)
        return self._model(VmInfo, "vm.info", status, content)

    def counters(self, *, timeout: float | None = None) -> dict[str, dict[str, int]]:
        """`GET vm.counters`: per device id, its counters (e.g. `read_bytes`, `rx_frames`)."""
        status, content = self._call("GET", "vm.counters", None, timeout)
        data = self._json("vm.counters", status, content)
        if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
            raise InternalError("vm.counters", status, [], f"unexpected answer {content[:200]!r}")
        return data

    def pause(self, *, timeout: float | None = None) -> None:
        self._put("vm.pause", None, timeout)

    def resume(self, *, timeout: float | None = None) -> None:
        self._put("vm.resume", None, timeout)

    def shutdown(self, *, timeout: float | None = None) -> None:
        """`PUT vm.shutdown`: a hard stop; the config stays and `vm.info` reads `Created`."""
        self._put("vm.shutdown", None, timeout)

    def reboot(self, *, timeout: float | None = None) -> None:
        """`PUT vm.reboot`: a hard reset, the VM is rebuilt from its config."""
        self._put("vm.reboot", None, timeout)

    def power_button(self, *, timeout: float | None = None) -> None:
        """`PUT vm.power-button`: ACPI power button; the guest decides what happens."""
        self._put("vm.power-button", None, timeout)

    def delete(self, *, timeout: float | None = None) -> None:
        """`PUT vm.delete`: stops the VM if running and drops its config; a no-op without one."""
        self._put("vm.delete", None, timeout)

    def resize(
        self,
        desired_vcpus: int | None = None,
        desired_ram: int | None = None,
        desired_balloon: int | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """`PUT vm.resize`. `Conflict` with status 429 while a vCPU removal is pending."""
        body = _given(desired_vcpus=desired_vcpus, desired_ram=desired_ram, desired_balloon=desired_balloon)
        if not body:
            raise ValueError("resize() needs at least one of desired_vcpus, desired_ram, desired_balloon")
        self._put("vm.resize", body, timeout)

    def resize_disk(self, id: str, desired_size: int, *, timeout: float | None = None) -> None:  # noqa: A002
        """`PUT vm.resize-disk` (v50+) of a booted VM's disk: a raw or qcow2 image file is grown
        (or shrunk) to `desired_size`, a block device must already have that size; then the
        guest is told (virtio config change). The size must be a multiple of 512."""
        self._put("vm.resize-disk", {"id": id, "desired_size": desired_size}, timeout)

    # --- devices ----------------------------------------------------------------------------

    def add_disk(self, disk: DiskConfig | dict[str, Any], *, timeout: float | None = None) -> PciDeviceInfo | None:
        """`PUT vm.add-disk`: `PciDeviceInfo` on a booted VM, None on a cold add (204) or when a
        success answer does not name the device's id and bdf (logged; the device was added)."""
        return self._add("vm.add-disk", disk, timeout)

    def add_net(self, net: NetConfig | dict[str, Any], *, timeout: float | None = None) -> PciDeviceInfo | None:
        """`PUT vm.add-net` with a named tap (`tap`); tap fds by SCM_RIGHTS are not supported here."""
        return self._add("vm.add-net", net, timeout)

    def add_vsock(self, vsock: VsockConfig | dict[str, Any], *, timeout: float | None = None) -> PciDeviceInfo | None:
        """`PUT vm.add-vsock`: a virtio-vsock device (the guest agent's channel, its next user)."""
        return self._add("vm.add-vsock", vsock, timeout)

    def add_device(self, device: DeviceConfig | dict[str, Any], *,
                   timeout: float | None = None) -> PciDeviceInfo | None:
        """`PUT vm.add-device`: a VFIO device by sysfs path."""
        return self._add("vm.add-device", device, timeout)

    def remove_device(self, id: str, *, timeout: float | None = None) -> None:  # noqa: A002 (CH's name)
        """`PUT vm.remove-device`. An unknown id raises `Conflict` on every version."""
        self._put("vm.remove-device", {"id": id}, timeout)

    # --- snapshot and migration -------------------------------------------------------------

    def snapshot(self, destination_url: str, *, timeout: float | None = None) -> None:
        """`PUT vm.snapshot` into an existing `file:///dir`; the VM must be paused."""
        self._put("vm.snapshot", {"destination_url": destination_url}, timeout)

    def restore(
        self,
        source_url: str,
        prefault: bool | None = None,
        resume: bool | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """`PUT vm.restore` (no VM may exist). Ends Paused unless `resume=True` (v52+)."""
        self._put("vm.restore", _given(source_url=source_url, prefault=prefault, resume=resume), timeout)

    def send_migration(
        self,
        destination_url: str,
        local: bool | None = None,
        downtime_ms: int | None = None,
        timeout_s: int | None = None,
        connections: int | None = None,
        tls_dir: str | None = None,
        timeout_strategy: str | None = None,
        *,
        timeout: float | None = None,
    ) -> None:
        """`PUT vm.send-migration`. v53+ returns at once (progress comes as events); <= v52
        blocks until the migration ends, so give a generous `timeout=` there. `timeout_strategy`
        (`Cancel` | `Ignore`, v53) says what `timeout_s` does to a migration that has not converged."""
        body = _given(destination_url=destination_url, local=local, downtime_ms=downtime_ms, timeout_s=timeout_s,
                      connections=connections, tls_dir=tls_dir, timeout_strategy=timeout_strategy)
        self._put("vm.send-migration", body, timeout)

    def receive_migration(self, receiver_url: str, tls_dir: str | None = None, *, timeout: float | None = None) -> None:
        """`PUT vm.receive-migration`: blocks the whole API until the migration ends."""
        self._put("vm.receive-migration", _given(receiver_url=receiver_url, tls_dir=tls_dir), timeout)

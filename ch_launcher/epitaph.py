"""The launcher's epitaph: what virt-handler is told when the launcher dies while its VM runs.

virt-handler learns of a VM's end from its launcher, as a Domain event over Notify. A launcher
that dies (SIGKILL, the OOM killer, a crash) tells it nothing, and KubeVirt's own way to notice
is its watchdog, which gives up on a launcher whose command socket stopped answering after 30 to
45 s (`handleStaleSocketConnections`, kubevirt pkg/virt-handler/cache/domain-watcher.go@d923fdb815cd).
So, while a VM runs here, the launcher keeps in a file the Domain virt-handler should get if it
died now: its current Domain as Shutoff/Crashed, what it sends itself when its VMM crashes
(`EpitaphFile`, written by the domain record; removed once no VM runs here, so a clean exit, a
migration's target before the VM arrives and a source after it left have none). The monitor,
which outlives the launcher as the container's first process, stops the VMM and sends the file's
Domain and a Warning event (`deliver`): virt-handler marks the VMI Failed at once.

`deliver` runs in the monitor (`python -I -S`, standard library only) at most once, when the
launcher has died: it imports nothing of grpcio and needs no process of its own.
"""

from __future__ import annotations

import contextlib
import os

FILE_NAME = "epitaph.json"  # in the launcher's private directory
REASON = "LauncherCrashed"


def path_in(private_dir: str) -> str:
    return os.path.join(private_dir, FILE_NAME)


class EpitaphFile:
    """The launcher's side: the Domain to send if it dies now. `write` replaces the file whole (a
    temporary file renamed over it, so the monitor never reads half of one), or removes it for
    "". It touches the disk only when the text changed. OSError when it cannot."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._text: str | None = None  # unknown until the first write: a stale file is removed then

    def write(self, domain_json: str) -> None:
        if domain_json == self._text:
            return
        self._text = None
        if domain_json:
            temporary = self.path + ".new"
            with open(temporary, "w") as f:
                f.write(domain_json)
            os.replace(temporary, self.path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)
        self._text = domain_json


def deliver(path: str, notify_socket: str, *, namespace: str, name: str, uid: str, how: str,
            timeout: float = 5.0) -> str | None:
    """The monitor's side, once the launcher has died (`how`: "(pid 12) was killed by signal 9", ...): send
    virt-handler a Warning event saying why, then the epitaph at `path`, if there is one. The
    event goes first: once virt-handler has the epitaph it fails the VMI and cleans it up, and an
    event sent after it never reached the VMI on a real node. What to log, or None when there was
    no epitaph (no VM ran here). Never raises."""
    try:
        with open(path, "rb") as f:
            domain = f.read()
    except OSError:
        return None
    from ch_launcher import grpc_lite
    from ch_launcher.kubevirt.events import k8s_event_json

    notify = "/kubevirt.notify.v1.Notify/"
    try:  # best effort, as every Kubernetes event
        event = k8s_event_json(type="Warning", reason=REASON, namespace=namespace, name=name, uid=uid,
                               message=f"ch-launcher {how} while the VM was running; the VM is gone")
        answer = grpc_lite.fields(
            grpc_lite.call(notify_socket, notify + "HandleK8sEvent", grpc_lite.field_bytes(1, event), timeout))
        event_note = "" if answer.get(1) else f"; virt-handler refused its {REASON} event: {_text(answer.get(2))}"
    except (grpc_lite.CallFailed, ValueError) as e:
        event_note = f"; its {REASON} event did not reach virt-handler: {e}"
    request = grpc_lite.field_bytes(1, domain) + grpc_lite.field_bytes(3, "MODIFIED")  # DomainEventRequest
    try:
        answer = grpc_lite.fields(grpc_lite.call(notify_socket, notify + "HandleDomainEvent", request, timeout))
    except (grpc_lite.CallFailed, ValueError) as e:
        return f"could not tell virt-handler that the VM is gone: {e}{event_note}"
    if not answer.get(1):
        return f"virt-handler refused the VM's end: {_text(answer.get(2))}{event_note}"
    return f"told virt-handler that the VM is gone (Shutoff/Crashed){event_note}"


def _text(value: bytes | int | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""

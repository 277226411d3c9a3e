"""Cloud Hypervisor's hybrid vsock, the host's end: a connection to a port the guest listens on.

A VM's virtio-vsock device (`VmConfig.vsock`) has no AF_VSOCK address on the host: its host end
is a unix socket (`VsockConfig.socket`) the VMM listens on (Firecracker's design, `virtio-devices/
src/vsock/unix/muxer.rs@v53.0`). A host process connects to it, writes `CONNECT <port>\\n`
(case-insensitive, at most one line) and, once the guest accepted on that port, reads
`OK <host port>\\n` (the port the VMM gave the host's side, from 2**30 upward); from then on the
stream is the guest connection. What the VMM does otherwise (measured on v53.0,
tests/contract/test_vsock.py):

- nothing listens on the guest port: the guest answers with a reset and the VMM closes the
  stream without a word (`VsockRefused`);
- the guest's driver has not activated the device (early boot, a guest without the driver)
  or the VM is paused: nobody accepts, the command sits in the socket's backlog and no answer
  comes (`VsockTimeout`); the VMM reads it, and drops it, once the device runs. Connections
  given up stay in the backlog (somaxconn, 4096 by default): once it is full, a connection fails at once (also
  `VsockTimeout`);
- no VM: the socket does not exist (before `vm.boot`, after the VM stopped: the VMM removes it)
  or nobody listens on it (a VMM that was killed leaves the file) (`VsockUnavailable`).

Never blocks the event loop; `connect` is bounded by its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

CONNECT = "CONNECT {port}\n"
MAX_ANSWER = 64  # "OK 1073741824\n" is 14 bytes


class VsockError(Exception):
    """No guest connection; `str()` says why."""


class VsockUnavailable(VsockError):
    """There is no VM behind the socket (missing, or nobody listens on it)."""


class VsockRefused(VsockError):
    """The guest runs its vsock driver but nothing listens on the port."""


class VsockTimeout(VsockError):
    """No answer in time: the guest has not activated its vsock device, or the VM is paused."""


async def connect(path: str, port: int, timeout: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to guest port `port` through the VM's vsock socket `path`, within `timeout`
    seconds. Raises VsockUnavailable, VsockRefused or VsockTimeout; nothing is left open then."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC | socket.SOCK_NONBLOCK)
    try:
        # A unix socket connects at once or not at all: into the listener's backlog, which the
        # VMM empties only while the device runs. A full one (a guest that never activated the
        # device) is EAGAIN, which asyncio's connect would take for "in progress".
        sock.connect(path)
        reader, writer = await asyncio.open_unix_connection(sock=sock, limit=1 << 20)
    except (FileNotFoundError, ConnectionRefusedError) as e:
        sock.close()
        raise VsockUnavailable(f"no VM behind {path}: {e.strerror}") from None
    except BlockingIOError:
        sock.close()
        raise VsockTimeout(f"{path}: the VMM accepts no connection (its backlog is full: the guest has not "
                           "activated its vsock device)") from None
    except OSError as e:
        sock.close()
        raise VsockUnavailable(f"cannot connect to {path}: {e.strerror or e}") from None
    try:
        writer.write(CONNECT.format(port=port).encode())
        line = await asyncio.wait_for(reader.readline(), timeout)
    except TimeoutError:
        _close(writer)
        raise VsockTimeout(f"the guest did not answer a connection to vsock port {port} within {timeout:g} s "
                           "(its vsock driver is not running, or the VM is paused)") from None
    except (OSError, ValueError) as e:
        _close(writer)
        raise VsockRefused(f"the VMM closed the connection to vsock port {port}: {e}") from None
    if not line.startswith(b"OK ") or not line.endswith(b"\n"):
        _close(writer)
        if not line:
            raise VsockRefused(f"nothing listens on vsock port {port} in the guest (the VMM closed the connection)")
        raise VsockRefused(f"unexpected answer to CONNECT {port}: {line[:MAX_ANSWER]!r}")
    return reader, writer


def _close(writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, RuntimeError):
        writer.close()

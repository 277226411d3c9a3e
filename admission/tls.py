"""A server SSLContext whose certificate follows the files on disk (rotation without restart).

The listening socket keeps one *base* context; its SNI callback, which OpenSSL calls on every
ClientHello (with or without a server name), first checks the two files at most once per
`interval` seconds (a stat each: cheap) and then hands the connection the *current* context.
A changed pair is loaded into a brand-new context and swapped in only if it loads (a half-written
rotation, or a key that does not match the certificate, keeps the previous pair serving and is
retried at the next check), so new connections see the new certificate and established ones
keep theirs. TLS 1.2 is the minimum.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class TLSFilesError(RuntimeError):
    """The certificate or key cannot be loaded (message names the files and the reason)."""


def _signature(path: str) -> tuple[int, int, int]:
    st = os.stat(path)
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A TLS >= 1.2 server context with this pair. Raises TLSFilesError naming the problem."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as e:
        raise TLSFilesError(f"TLS file not found: {e.filename}") from None
    except (ssl.SSLError, OSError) as e:
        raise TLSFilesError(f"cannot load TLS certificate {cert_file} with key {key_file}: {e}") from None
    return ctx


class ReloadingTLS:
    """Serve `cert_file`/`key_file` and follow them when they change. Construction raises
    TLSFilesError if the initial pair does not load; later failures only log and count."""

    def __init__(self, cert_file: str, key_file: str, interval: float = 1.0,
                 on_reload: Callable[[bool], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.cert_file, self.key_file = cert_file, key_file
        self.interval = interval
        self._on_reload = on_reload
        self._clock = clock
        self._lock = threading.Lock()
        self._signature = self._files_signature()
        self.current = server_context(cert_file, key_file)
        self.base = server_context(cert_file, key_file)
        self.base.sni_callback = self._sni
        self._next_check = clock() + interval
        self.loaded_at = time.time()

    def _files_signature(self) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
        try:
            return (_signature(self.cert_file), _signature(self.key_file))
        except OSError:
            return None  # mid-rotation (a file briefly absent): keep serving, look again later

    def maybe_reload(self) -> bool:
        """Reload if the files changed since the last successful load; True when swapped."""
        now = self._clock()
        if now < self._next_check:
            return False
        with self._lock:
            if now < self._next_check:
                return False
            self._next_check = now + self.interval
            signature = self._files_signature()
            if signature is None or signature == self._signature:
                return False
            try:
                fresh = server_context(self.cert_file, self.key_file)
            except TLSFilesError as e:
                log.warning("TLS files changed but do not load yet, still serving the previous pair: %s", e)
                if self._on_reload:
                    self._on_reload(False)
                return False
            self.current = fresh
            self._signature = signature
            self.loaded_at = time.time()
        log.info("TLS certificate reloaded from %s", self.cert_file)
        if self._on_reload:
            self._on_reload(True)
        return True

    def _sni(self, sslobj: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
             ctx: ssl.SSLContext) -> int | None:
        try:
            self.maybe_reload()
            sslobj.context = self.current
        except Exception:  # never break a handshake over a reload problem
            log.exception("TLS reload check failed; serving the previous certificate")
        return None

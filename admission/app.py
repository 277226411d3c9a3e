"""The `ch-admission serve` HTTPS server: one aiohttp application on one asyncio loop.

Why aiohttp (docs/admission.md): already a dependency, one asyncio server with stdlib `ssl`
(so the certificate can be swapped per connection, `tls.py`), a request body limit built in
(`client_max_size`), and fast enough (bench/admission.py).

Paths (docs/admission.md): `POST /validate`, `POST /mutate-pod`, `GET /healthz`, `GET /readyz`,
`GET /metrics`, `POST /mutate-vmi` (virt-controller's VMI writes: `launcher_status.py`) and
`POST /validate-migration` (VirtualMachineInstanceMigrations: `migrations.py`).
Deciding is pure (`rules.py`, `mutate.py`); this module only reads bodies, does the API calls in
a thread pool, and answers. A body that is not an AdmissionReview is
answered at once with its HTTP status and a `metav1.Status` naming the problem: 415 (not
`application/json`), 413 (over `MAX_BODY`, without reading it), 408 (body not received within
`BODY_TIMEOUT`), 400 (not JSON / not an AdmissionReview v1 request). An unexpected exception
in a handler becomes a 500 with its message; the server itself keeps serving.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from admission import launcher_status, migrations, mutate, rules
from admission.cluster import KubeVirtStatus, conditions
from admission.config import Config, ConfigError, load_config
from admission.kube import KubeClient, KubeError
from admission.report import ConditionReporter, EventPoster
from admission.review import AdmissionRequest, ReviewError, http_error_status, is_json_content_type, parse_review
from admission.tls import ReloadingTLS, TLSFilesError

log = logging.getLogger("admission")

MAX_BODY = 3 * 1024 * 1024 + 64 * 1024  # the API server sends at most ~3 MiB objects, plus the envelope
# Seconds to receive a body once the headers are in: the webhooks' timeoutSeconds (addon_manifests),
# after which the API server has given up on the answer anyway.
BODY_TIMEOUT = 5.0
KUBEVIRT_TTL = 300.0  # re-read the KubeVirt CR this often
KUBEVIRT_ERROR_TTL = 5.0  # retry this soon after a failed read
# /mutate-vmi writes virt-controller's launcher image into VMIs: read it at most this long ago, so
# that a KubeVirt upgrade (a new image) is seen before the new virt-controller's first writes.
LAUNCHER_IMAGE_MAX_AGE = 10.0
READY_TTL = 10.0  # /readyz re-probes the API server at most this often
CERT_RECHECK = 600.0  # --self-signed: re-read the Secret and re-check caBundle this often

T = TypeVar("T")


class Metrics:
    """Prometheus metrics on a private registry (one per server, so tests can run several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("ch_admission_requests", "Admission requests by path and verdict",
                                ["path", "verdict"], registry=self.registry)
        self.latency = Histogram("ch_admission_request_duration_seconds", "Time to answer, by path", ["path"],
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
                                 registry=self.registry)
        self.tls_reloads = Counter("ch_admission_tls_reloads", "Certificate reloads by result", ["result"],
                                   registry=self.registry)
        self.kube_errors = Counter("ch_admission_kube_errors", "Failed API server calls by call", ["call"],
                                   registry=self.registry)
        self.cert_loaded = Gauge("ch_admission_certificate_loaded_timestamp_seconds",
                                 "When the serving certificate in use was loaded", registry=self.registry)
        self.cluster_condition = Gauge("ch_admission_cluster_condition",
                                       "1 while a cluster-wide condition holds (docs/operations.md §7)",
                                       ["condition"], registry=self.registry)


class KubeVirtCache:
    """The cluster's KubeVirt status, read once and refreshed every KUBEVIRT_TTL; after a failed
    refresh the last good status is kept (a stale version beats refusing everything).
    `fetched` is the latest read as it came, failed or not."""

    def __init__(self, fetch: Callable[[], KubeVirtStatus],
                 run: Callable[[Callable[[], KubeVirtStatus]], Awaitable[KubeVirtStatus]],
                 on_refresh: Callable[[KubeVirtStatus, KubeVirtStatus], None] | None = None):
        self._fetch, self._run, self._on_refresh = fetch, run, on_refresh
        self._value: KubeVirtStatus | None = None
        self._good: KubeVirtStatus | None = None
        self.fetched: KubeVirtStatus | None = None
        self._expires = 0.0
        self._read_at = 0.0
        self._lock = asyncio.Lock()

    def _fresh(self, max_age: float | None) -> KubeVirtStatus | None:
        """The status held, while within its TTL and `max_age`; else None."""
        now = time.monotonic()
        if self._value is not None and now < self._expires and (max_age is None or now - self._read_at < max_age):
            return self._value
        return None

    async def get(self, max_age: float | None = None) -> KubeVirtStatus:
        """The status, read again when older than its TTL or than `max_age` seconds."""
        if (status := self._fresh(max_age)) is not None:
            return status
        async with self._lock:
            if (status := self._fresh(max_age)) is not None:
                return status
            return await self._refresh_locked()

    async def refresh(self) -> KubeVirtStatus:
        """Read now, whatever the TTL; the status the webhooks will use."""
        async with self._lock:
            return await self._refresh_locked()

    async def _refresh_locked(self) -> KubeVirtStatus:
        status = self.fetched = await self._run(self._fetch)
        self._read_at = time.monotonic()
        if status.version is not None:
            self._good = status
        elif self._good is not None:
            log.warning("cannot refresh the KubeVirt status (%s); keeping %s", status.error, self._good.version)
            status = self._good
        self._value = status
        self._expires = time.monotonic() + (KUBEVIRT_TTL if status.version else KUBEVIRT_ERROR_TTL)
        if self._on_refresh is not None:
            self._on_refresh(self.fetched, status)
        return status


@dataclass
class Server:
    """Everything the handlers share."""

    config: Config
    kube: KubeClient | None = None
    tls: ReloadingTLS | None = None
    metrics: Metrics = field(default_factory=Metrics)
    executor: ThreadPoolExecutor = field(default_factory=lambda: ThreadPoolExecutor(8, "ch-admission-api"))
    kubevirt: KubeVirtCache | None = None
    events: EventPoster | None = None  # where Events about cluster-wide conditions go (serve() sets it)
    reporter: ConditionReporter | None = None
    _ready_until: float = 0.0
    _ready_error: str = "not checked yet"
    _background: set[asyncio.Future[Any]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.reporter = ConditionReporter(self.metrics.cluster_condition)
        if self.kube is not None and self.kubevirt is None:
            self.kubevirt = KubeVirtCache(self._read_kubevirt, self.run, self._report)

    async def run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)

    def _read_kubevirt(self) -> KubeVirtStatus:
        assert self.kube is not None
        try:
            return KubeVirtStatus.from_cr(self.kube.get_kubevirt(self.config.kubevirt.namespace,
                                                                 self.config.kubevirt.name))
        except KubeError as e:
            self.metrics.kube_errors.labels("get_kubevirt").inc()
            return KubeVirtStatus(error=e.message)

    async def api_problem(self) -> str:
        """Why the API server is not usable ("" when it is, or when there is no client), probed
        at most every READY_TTL seconds (/readyz)."""
        if self.kube is None:
            return ""
        if time.monotonic() >= self._ready_until:
            try:
                await self.run(self.kube.server_version)
                self._ready_error = ""
            except KubeError as e:
                self.metrics.kube_errors.labels("version").inc()
                self._ready_error = e.message
            self._ready_until = time.monotonic() + READY_TTL
        return self._ready_error

    @property
    def background(self) -> tuple[asyncio.Future[Any], ...]:
        """The Event posts still running (serve() cancels them when it stops)."""
        return tuple(self._background)

    async def kubevirt_status(self, max_age: float | None = None) -> KubeVirtStatus | None:
        """The cluster's KubeVirt (read at most `max_age` seconds ago, if given), None without an API client."""
        return await self.kubevirt.get(max_age) if self.kubevirt is not None else None

    def _report(self, fetched: KubeVirtStatus, effective: KubeVirtStatus) -> None:
        """After every read of the KubeVirt CR: the cluster-wide conditions to the log, the
        metric and (in the thread pool, not holding up any answer) Events."""
        assert self.reporter is not None
        where = f"{self.config.kubevirt.namespace}/{self.config.kubevirt.name}"
        events = self.reporter.update(conditions(fetched, effective, self.config.kubevirt.version_range, where))
        if events and self.events is not None:
            poster = self.events
            task = asyncio.ensure_future(self.run(lambda: poster.post(events)))
            self._background.add(task)
            task.add_done_callback(self._background.discard)


class _Answer(Exception):
    """An HTTP-level answer (the body is not an AdmissionReview we can respond to)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def _status_response(status: int, message: str) -> web.Response:
    return web.json_response(http_error_status(status, message), status=status)


async def _read_review(request: web.Request) -> AdmissionRequest:
    if not is_json_content_type(request.headers.get("Content-Type")):
        raise _Answer(415, f"Content-Type must be application/json, got {request.headers.get('Content-Type')!r}")
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise _Answer(413, f"request body of {request.content_length} bytes exceeds the limit of {MAX_BODY} bytes")
    try:
        body = await asyncio.wait_for(request.read(), BODY_TIMEOUT)
    except web.HTTPRequestEntityTooLarge:
        raise _Answer(413, f"request body exceeds the limit of {MAX_BODY} bytes") from None
    except TimeoutError:
        raise _Answer(408, f"request body not received within {BODY_TIMEOUT:g} s") from None
    try:
        return parse_review(body)
    except ReviewError as e:
        raise _Answer(e.status, e.message) from None


def _log_outcome(path: str, req: Any, outcome: rules.Outcome) -> None:
    if outcome.verdict in ("denied", "invalid"):
        status = outcome.review["response"].get("status", {})
        log.info("%s %s %s %s/%s uid=%s: %s", path, outcome.verdict, req.kind or "object", req.namespace,
                 req.name or "(generated)", req.uid, status.get("message"))
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("%s %s %s %s/%s uid=%s", path, outcome.verdict, req.kind, req.namespace, req.name, req.uid)


def make_app(server: Server) -> web.Application:
    """The aiohttp application. Separate from serving so tests can run it on any socket."""
    metrics = server.metrics

    paths = ("/validate", "/validate-migration", "/mutate-pod", "/mutate-vmi", "/healthz", "/readyz", "/metrics")

    @web.middleware
    async def observe(request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        start = time.perf_counter()
        path = request.path if request.path in paths else "other"
        try:
            response = await handler(request)
            verdict = request.get("verdict") or str(response.status)
        except _Answer as e:
            response, verdict = _status_response(e.status, e.message), "invalid"
        except web.HTTPException as e:  # 404/405 from the router
            response, verdict = _status_response(e.status, e.reason), "invalid"
        except Exception as e:  # a bug must not take the server down
            log.exception("error answering %s", request.path)
            response, verdict = _status_response(500, f"internal error: {type(e).__name__}: {e}"), "error"
        metrics.requests.labels(path, verdict).inc()
        metrics.latency.labels(path).observe(time.perf_counter() - start)
        return response

    async def validate(request: web.Request) -> web.Response:
        req = await _read_review(request)
        wanted = rules.wants_kubevirt_status(req)
        status = await server.kubevirt_status(wanted.max_age) if wanted is not None else None
        outcome = rules.validate(req, server.config, status)
        request["verdict"] = outcome.verdict
        _log_outcome("/validate", req, outcome)
        return web.json_response(outcome.review)

    async def validate_migration(request: web.Request) -> web.Response:
        req = await _read_review(request)
        first = migrations.wants_vmi(req)
        if isinstance(first, migrations.VMIName):
            named, problem = first, ""
            if server.kube is None:
                problem = "the server has no Kubernetes API client (--kubeconfig, or run in a pod)"
            else:
                kube = server.kube
                try:
                    vmi = await server.run(lambda: kube.get_vmi(named.namespace, named.name))
                except KubeError as e:
                    vmi = None
                    if e.status != 404:  # a missing VMI is virt-api's to refuse
                        metrics.kube_errors.labels("get_vmi").inc()
                        problem = e.message
            if problem:
                log.warning("/validate-migration %s/%s: cannot judge the migration of VMI %s: %s; allowed "
                            "(the source launcher fails what Cloud Hypervisor cannot migrate)", req.namespace,
                            req.name or "(generated)", named.name, problem)
                first = migrations.unreadable(req)
            else:
                first = migrations.decide(req, vmi)
        request["verdict"] = first.verdict
        _log_outcome("/validate-migration", req, first)
        return web.json_response(first.review)

    async def mutate_pod(request: web.Request) -> web.Response:
        req = await _read_review(request)
        first = mutate.plan(req, server.config)
        if isinstance(first, mutate.NeedsVMI):
            vmi, error = None, None
            if server.kube is None:
                error = "the server has no Kubernetes API client (--kubeconfig, or run in a pod)"
            else:
                kube, namespace, name = server.kube, first.namespace, first.name
                try:
                    vmi = await server.run(lambda: kube.get_vmi(namespace, name))
                except KubeError as e:
                    metrics.kube_errors.labels("get_vmi").inc()
                    error = e.message
            status = await server.kubevirt_status()
            first = mutate.mutate_pod(req, server.config, first, vmi, error, status)
        request["verdict"] = first.verdict
        _log_outcome("/mutate-pod", req, first)
        return web.json_response(first.review)

    async def mutate_vmi(request: web.Request) -> web.Response:
        req = await _read_review(request)
        launcher = None
        if server.kubevirt is not None and launcher_status.wants_launcher_image(req, server.config):
            launcher = (await server.kubevirt.get(max_age=LAUNCHER_IMAGE_MAX_AGE)).launcher_image
        outcome = launcher_status.decide(req, server.config, launcher)
        request["verdict"] = outcome.verdict
        if outcome.verdict == "unknown":
            log.warning("/mutate-vmi %s/%s: cannot make it current, virt-controller's launcher image is not known "
                        "(%s); it looks outdated to KubeVirt", req.namespace, req.name,
                        launcher.error if launcher is not None else "no Kubernetes API client")
        elif outcome.verdict == "outdated" or log.isEnabledFor(logging.DEBUG):
            log.log(logging.INFO if outcome.verdict == "outdated" else logging.DEBUG, "/mutate-vmi %s %s/%s",
                    outcome.verdict, req.namespace, req.name)
        return web.json_response(outcome.review)

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(request: web.Request) -> web.Response:
        if server.tls is None:
            return web.Response(status=503, text="TLS certificate not loaded\n")
        problem = await server.api_problem()
        if problem:
            return web.Response(status=503, text=f"API server not usable: {problem}\n")
        return web.Response(text="ok\n")

    async def metrics_handler(request: web.Request) -> web.Response:
        if server.tls is not None:
            metrics.cert_loaded.set(server.tls.loaded_at)
        body = generate_latest(metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application(client_max_size=MAX_BODY, middlewares=[observe])
    app.router.add_post("/validate", validate)
    app.router.add_post("/validate-migration", validate_migration)
    app.router.add_post("/mutate-pod", mutate_pod)
    app.router.add_post("/mutate-vmi", mutate_vmi)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    return app


# --- serve ------------------------------------------------------------------------------------


async def _self_signed_round(server: Server, ns: argparse.Namespace) -> tuple[str, str]:
    """Ensure the shared Secret, write the files, re-inject the CA bundle. Blocking calls run in the pool."""
    from admission import certs
    assert server.kube is not None
    kube = server.kube
    names = certs.dns_names(ns.service, ns.namespace)
    bundle = await server.run(lambda: certs.ensure_secret(kube, ns.namespace, ns.cert_secret, names))
    paths = await server.run(lambda: certs.write_files(ns.cert_dir, bundle))
    configurations = [c.strip() for c in ns.webhook_configurations.split(",") if c.strip()]
    await server.run(lambda: certs.inject_ca_bundle(kube, configurations, bundle.ca_cert))
    return paths


async def _self_signed_start(server: Server, ns: argparse.Namespace) -> tuple[str, str]:
    """At start-up the API server may be briefly unreachable: retry for about a minute."""
    from admission.certs import CertError
    delay, deadline = 0.5, time.monotonic() + 60
    while True:
        try:
            return await _self_signed_round(server, ns)
        except (KubeError, CertError) as e:
            if time.monotonic() > deadline or (isinstance(e, KubeError) and e.status in (401, 403)):
                raise
            log.warning("self-managed certificates not ready (%s); retrying in %.1f s", e, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8)


async def _self_signed_loop(server: Server, ns: argparse.Namespace) -> None:
    from admission.certs import CertError
    while True:
        await asyncio.sleep(CERT_RECHECK)
        try:
            await _self_signed_round(server, ns)
        except (KubeError, CertError) as e:
            log.warning("certificate re-check failed, will retry: %s", e)


async def _kubevirt_loop(server: Server) -> None:
    """Read the KubeVirt CR at start-up and every KUBEVIRT_TTL, so that the cluster-wide conditions
    are reported (Server._report) even while no VMI is being created."""
    assert server.kubevirt is not None
    while True:
        try:
            await server.kubevirt.refresh()
        except Exception:  # the next round retries; the webhooks read on their own
            log.exception("reading the KubeVirt CR failed")
        await asyncio.sleep(KUBEVIRT_TTL)


async def _unless_stopped(work: Awaitable[T], stop: asyncio.Event) -> T | None:
    """`work`'s result, or None (work cancelled) if `stop` is set first."""
    working = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait((working, stopping), return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if working.done():
        return working.result()
    working.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await working
    return None


async def serve(ns: argparse.Namespace, config: Config, kube: KubeClient | None) -> None:
    """Serve until SIGTERM/SIGINT (also during start-up); the log line "serving https://ADDR:PORT"
    says when requests are answered. Start-up failures propagate (TLSFilesError, KubeError,
    CertError) after the same clean-up as a stop."""
    server = Server(config=config, kube=kube)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before anything else: a stop during start-up is clean too
        loop.add_signal_handler(sig, stop.set)
    runner: web.AppRunner | None = None
    renewal: asyncio.Task[None] | None = None
    watching: asyncio.Task[None] | None = None
    if kube is not None:
        server.events = EventPoster(kube, ns.namespace, ns.deployment)
    try:
        if ns.self_signed:
            # The first round retries an unreachable API server for about a minute; a SIGTERM
            # meanwhile ends start-up at once (a pod's grace period is shorter than that).
            paths = await _unless_stopped(_self_signed_start(server, ns), stop)
            if paths is None:
                log.info("stopped during start-up")
                return
            cert_file, key_file = ns.tls_cert_file or paths[0], ns.tls_private_key_file or paths[1]
        else:
            cert_file, key_file = ns.tls_cert_file, ns.tls_private_key_file

        def on_reload(ok: bool) -> None:
            server.metrics.tls_reloads.labels("ok" if ok else "failed").inc()

        server.tls = ReloadingTLS(cert_file, key_file, on_reload=on_reload)
        runner = web.AppRunner(make_app(server), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, ns.address, ns.port, ssl_context=server.tls.base, backlog=1024)
        await site.start()
        port = next(iter(runner.addresses))[1]
        log.info("serving https://%s:%d (validate, validate-migration, mutate-pod, mutate-vmi, healthz, readyz, "
                 "metrics)", ns.address, port)
        renewal = asyncio.create_task(_self_signed_loop(server, ns)) if ns.self_signed else None
        watching = asyncio.create_task(_kubevirt_loop(server)) if server.kubevirt is not None else None
        await stop.wait()
        log.info("shutting down")
    finally:
        for task in (renewal, watching, *server.background):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if runner is not None:
            await runner.cleanup()
        server.executor.shutdown(wait=False, cancel_futures=True)
        if kube is not None:
            kube.close()


def serve_main(ns: argparse.Namespace) -> int:
    """Entry point of `ch-admission serve`. Exit 2 on bad configuration, 1 on a start-up failure."""
    logging.basicConfig(level=getattr(logging, ns.log_level.upper()), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(ns.config)
    except ConfigError as e:
        log.error("%s", e)
        return 2
    if not ns.self_signed and not (ns.tls_cert_file and ns.tls_private_key_file):
        log.error("--tls-cert-file and --tls-private-key-file are required unless --self-signed")
        return 2
    try:
        kube = KubeClient.auto(ns.kubeconfig)
    except KubeError as e:
        log.error("%s", e)
        return 2
    if kube is None:
        if ns.self_signed:
            log.error("--self-signed needs the Kubernetes API (--kubeconfig, or run in a pod)")
            return 2
        log.warning("no Kubernetes API client: the pod mutator will refuse launcher pods and the KubeVirt "
                    "version gate is off")
    # Everything imported so far lives for the whole process: keep it out of the collector's
    # generations so full collections (and their pauses, which show in p99) stay short.
    gc.collect()
    gc.freeze()
    try:
        asyncio.run(serve(ns, config, kube))
    except TLSFilesError as e:
        log.error("%s", e)
        return 2
    except Exception as e:  # noqa: BLE001 - report start-up failures in one line, exit non-zero
        log.error("cannot start: %s", e)
        return 1
    return 0

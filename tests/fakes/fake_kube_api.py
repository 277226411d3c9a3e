"""A small Kubernetes API server for admission tests: real HTTPS, real bearer-token check, and
exactly the endpoints ch-admission calls, with the API server's status codes and Status bodies.

- `GET /version`
- `GET /apis/kubevirt.io/v1/namespaces/{ns}/virtualmachineinstances/{name}` and `.../kubevirts/{name}`
- Secrets: `GET`, `POST` (409 AlreadyExists when present), `PUT` (409 Conflict on a stale
  resourceVersion) under `/api/v1/namespaces/{ns}/secrets`
- `GET`/`PATCH` (`application/json-patch+json`, 422 when a `test` op fails) of
  `validating`/`mutatingwebhookconfigurations/{name}`
- Events: `POST /api/v1/namespaces/{ns}/events` (`generateName` honoured); `GET` of
  `/apis/apps/v1/namespaces/{ns}/deployments/{name}` (`add_deployment`)
- anything else: 404 NotFound. Without the token: 401 Unauthorized.

`FakeKubeAPI.start(tmpdir)` serves on 127.0.0.1 and writes a kubeconfig that trusts its CA.
Objects live in `objects` (a dict keyed by URL path); `requests` records (method, path).
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import pathlib
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from admission.certs import make_ca, make_serving
from tests.unit.admission.jsonpatch import PatchError, apply_patch

TOKEN = "fake-token-for-tests"

_COLLECTIONS = re.compile(r"^/api/v1/namespaces/([^/]+)/(secrets|events)$")
_RESOURCE_PREFIXES = ("/api/v1/namespaces/", "/apis/kubevirt.io/v1/namespaces/",
                      "/apis/admissionregistration.k8s.io/v1/", "/apis/apps/v1/")


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeKubeAPI:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self._versions = itertools.count(100)
        self.httpd: ThreadingHTTPServer | None = None
        self.kubeconfig = ""
        self.fail_with: int | None = None  # answer every resource request with this status (outage)

    # --- objects ---------------------------------------------------------------------------

    def put(self, path: str, obj: dict[str, Any]) -> None:
        with self.lock:
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
            self.objects[path] = obj

    def get(self, path: str) -> dict[str, Any] | None:
        with self.lock:
            return copy.deepcopy(self.objects.get(path))

    def add_vmi(self, vmi: dict[str, Any]) -> None:
        meta = vmi["metadata"]
        self.put(f"/apis/kubevirt.io/v1/namespaces/{meta['namespace']}/virtualmachineinstances/{meta['name']}", vmi)

    def add_kubevirt(self, version: str | None, namespace: str = "kubevirt", name: str = "kubevirt",
                     bindings: dict[str, str] | None = None, update_methods: list[str] | None = None,
                     deployment_config: dict[str, Any] | None = None,
                     permitted_host_devices: dict[str, Any] | None = None) -> None:
        """`deployment_config`: virt-operator's KubeVirtDeploymentConfig, as the JSON string it
        keeps in status.targetDeploymentConfig and observedDeploymentConfig;
        `permitted_host_devices`: spec.configuration.permittedHostDevices. Replaces any earlier one."""
        obj: dict[str, Any] = {"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                               "metadata": {"name": name, "namespace": namespace}, "spec": {}, "status": {}}
        if update_methods:
            obj["spec"]["workloadUpdateStrategy"] = {"workloadUpdateMethods": list(update_methods)}
        if version:
            obj["status"]["observedKubeVirtVersion"] = version
        if deployment_config is not None:
            text = json.dumps(deployment_config)
            obj["status"]["targetDeploymentConfig"] = obj["status"]["observedDeploymentConfig"] = text
        configuration: dict[str, Any] = {}
        if bindings:
            configuration["network"] = {"binding": {
                k: {"sidecarImage": "x", "computeResourceOverhead": {"requests": {"memory": v}}}
                for k, v in bindings.items()}}
        if permitted_host_devices is not None:
            configuration["permittedHostDevices"] = permitted_host_devices
        if configuration:
            obj["spec"]["configuration"] = configuration
        self.put(f"/apis/kubevirt.io/v1/namespaces/{namespace}/kubevirts/{name}", obj)

    def add_webhook_configuration(self, kind: str, name: str, webhooks: list[str]) -> None:
        plural = f"{kind}webhookconfigurations"
        obj = {"apiVersion": "admissionregistration.k8s.io/v1",
               "kind": f"{kind.title()}WebhookConfiguration",
               "metadata": {"name": name},
               "webhooks": [{"name": w, "admissionReviewVersions": ["v1"], "sideEffects": "None",
                             "clientConfig": {"service": {"name": "ch-admission", "namespace": "kubevirt-ch",
                                                          "path": "/validate", "port": 443}}}
                            for w in webhooks]}
        self.put(f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}", obj)

    def add_deployment(self, namespace: str, name: str, uid: str = "deployment-uid") -> None:
        self.put(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
                 {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {}})

    def events(self, namespace: str) -> list[dict[str, Any]]:
        prefix = f"/api/v1/namespaces/{namespace}/events/"
        with self.lock:
            return [copy.deepcopy(o) for p, o in self.objects.items() if p.startswith(prefix)]

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return sum(1 for m, p in self.requests if m == method and p == path)

    # --- serving ---------------------------------------------------------------------------

    def start(self, directory: pathlib.Path) -> FakeKubeAPI:
        ca_cert, ca_key = make_ca("fake kube-apiserver CA")
        cert, key = make_serving(ca_cert, ca_key, ["localhost", "127.0.0.1"])
        (directory / "api-ca.crt").write_bytes(ca_cert)
        (directory / "api.crt").write_bytes(cert)
        (directory / "api.key").write_bytes(key)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(directory / "api.crt", directory / "api.key")
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                api._handle(self, "GET")

            def do_POST(self) -> None:
                api._handle(self, "POST")

            def do_PUT(self) -> None:
                api._handle(self, "PUT")

            def do_PATCH(self) -> None:
                api._handle(self, "PATCH")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        threading.Thread(target=self.httpd.serve_forever, name="fake-kube-api", daemon=True).start()
        port = self.httpd.server_address[1]
        self.kubeconfig = str(directory / "kubeconfig")
        pathlib.Path(self.kubeconfig).write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {
                "server": f"https://127.0.0.1:{port}",
                "certificate-authority-data": base64.b64encode(ca_cert).decode()}}],
            "users": [{"name": "fake", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        }))
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        with self.lock:
            self.requests.append((method, path))
        if h.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._send(h, 401, status(401, "Unauthorized", "Unauthorized"))
        if path in ("/version", "/version/"):
            return self._send(h, 200, {"major": "1", "minor": "33", "gitVersion": "v1.33.0", "gitCommit": "fake",
                                       "gitTreeState": "clean", "buildDate": "2026-01-01T00:00:00Z",
                                       "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64"})
        if self.fail_with is not None and path.startswith(_RESOURCE_PREFIXES):
            return self._send(h, self.fail_with, status(self.fail_with, "InternalError", "simulated outage"))
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return self._send(h, 400, status(400, "BadRequest", "invalid JSON body"))
        code, answer = self._route(method, path, payload, h.headers.get("Content-Type", ""))
        return self._send(h, code, answer)

    def _route(self, method: str, path: str, payload: Any, content_type: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            m = _COLLECTIONS.match(path)
            if method == "POST" and m:
                meta = payload["metadata"]
                name = meta.get("name") or f"{meta['generateName']}{next(self._versions):x}"
                item = f"{path}/{name}"
                if item in self.objects:
                    return 409, status(409, "AlreadyExists", f'{m.group(2)} "{name}" already exists')
                obj = copy.deepcopy(payload)
                obj["metadata"]["name"] = name
                obj["metadata"]["namespace"] = m.group(1)
                obj["metadata"]["resourceVersion"] = str(next(self._versions))
                self.objects[item] = obj
                return 201, obj
            current = self.objects.get(path)
            if current is None:
                return 404, status(404, "NotFound", f"{path} not found")
            if method == "GET":
                return 200, copy.deepcopy(current)
            if method == "PUT":
                if payload["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                    return 409, status(409, "Conflict", "the object has been modified; please apply your "
                                                        "changes to the latest version and try again")
                obj = copy.deepcopy(payload)
                obj["metadata"]["resourceVersion"] = str(next(self._versions))
                self.objects[path] = obj
                return 200, obj
            if method == "PATCH":
                if not content_type.startswith("application/json-patch+json"):
                    return 415, status(415, "UnsupportedMediaType", f"unsupported patch type {content_type}")
                try:
                    obj = apply_patch(current, payload)
                except (PatchError, KeyError) as e:
                    return 422, status(422, "Invalid", f"the patch could not be applied: {e}")
                obj["metadata"]["resourceVersion"] = str(next(self._versions))
                self.objects[path] = obj
                return 200, obj
        return 405, status(405, "MethodNotAllowed", f"{method} not allowed")

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, obj: dict[str, Any]) -> None:
        data = json.dumps(obj).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

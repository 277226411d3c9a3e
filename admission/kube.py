"""The admission server's Kubernetes API calls, through the `kubernetes` client. Blocking I/O:
the server runs these in a thread pool.

`KubeClient` wraps exactly what the server needs (RBAC in docs/admission.md): read a VMI, read
the KubeVirt CR, read/create/update its own Secret, get/patch its webhook configurations, post
Events about its own Deployment (and read that Deployment's uid for them), and `/version` for
readiness. Every failure is raised as `KubeError` with the HTTP status (0 when
the API server was not reached) and a one-line message; nothing else escapes. Each call has a
short timeout so a webhook answer never waits on a slow API server longer than the webhook's
own 5 s budget.
"""

from __future__ import annotations

import json
import os
from typing import Any

import kubernetes
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException

TIMEOUT = (2.0, 3.0)  # connect, read (seconds)


class KubeError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _error(what: str, e: Exception) -> KubeError:
    if isinstance(e, ApiException):
        detail = e.reason or ""
        try:
            body = json.loads(e.body) if e.body else {}
            detail = body.get("message") or detail
        except (ValueError, TypeError, AttributeError):
            pass
        if e.status == 404:
            return KubeError(404, f"{what} not found")
        return KubeError(e.status or 0, f"{what}: HTTP {e.status}: {detail}")
    return KubeError(0, f"{what}: API server unreachable: {e}")


def _object(what: str, value: object) -> dict[str, Any]:
    """A decoded response that must be a JSON object (a custom object, a sanitized model)."""
    if not isinstance(value, dict):
        raise KubeError(500, f"{what}: the API server answered {type(value).__name__}, not an object")
    return value


class KubeClient:
    """One API client. Build with `from_kubeconfig()`, `in_cluster()` or `auto()`."""

    def __init__(self, api_client: kubernetes.client.ApiClient):
        self.api = api_client
        self.core = kubernetes.client.CoreV1Api(api_client)
        self.custom = kubernetes.client.CustomObjectsApi(api_client)
        self.admission = kubernetes.client.AdmissionregistrationV1Api(api_client)
        self.apps = kubernetes.client.AppsV1Api(api_client)
        self.version_api = kubernetes.client.VersionApi(api_client)

    @classmethod
    def from_kubeconfig(cls, path: str) -> KubeClient:
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_kube_config(config_file=path, client_configuration=configuration)
        except (kubernetes.config.ConfigException, OSError, ValueError, TypeError, yaml.YAMLError) as e:
            raise KubeError(0, f"cannot load kubeconfig {path}: {e}".replace("\n", " ")) from None
        configuration.retries = urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0)
        return cls(kubernetes.client.ApiClient(configuration))

    @classmethod
    def in_cluster(cls) -> KubeClient:
        configuration = kubernetes.client.Configuration()
        try:
            kubernetes.config.load_incluster_config(client_configuration=configuration)
        except kubernetes.config.ConfigException as e:
            raise KubeError(0, f"no in-cluster configuration: {e}") from None
        configuration.retries = urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0)
        return cls(kubernetes.client.ApiClient(configuration))

    @classmethod
    def auto(cls, kubeconfig: str) -> KubeClient | None:
        """`--kubeconfig` if given, else in-cluster if running in a pod, else None (no API)."""
        if kubeconfig:
            return cls.from_kubeconfig(kubeconfig)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return cls.in_cluster()
        return None

    def close(self) -> None:
        self.api.close()

    # --- reads for the webhooks -------------------------------------------------------------

    def get_vmi(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"VirtualMachineInstance {namespace}/{name}"
        try:
            found = self.custom.get_namespaced_custom_object(
                "kubevirt.io", "v1", namespace, "virtualmachineinstances", name, _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001 - every client failure becomes a KubeError
            raise _error(what, e) from None
        return _object(what, found)

    def get_kubevirt(self, namespace: str, name: str) -> dict[str, Any]:
        what = f"KubeVirt {namespace}/{name}"
        try:
            found = self.custom.get_namespaced_custom_object(
                "kubevirt.io", "v1", namespace, "kubevirts", name, _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001
            raise _error(what, e) from None
        return _object(what, found)

    def server_version(self) -> str:
        try:
            return self.version_api.get_code(_request_timeout=TIMEOUT).git_version
        except Exception as e:  # noqa: BLE001
            raise _error("API server /version", e) from None

    # --- Events (admission/report.py) --------------------------------------------------------

    def get_deployment_uid(self, namespace: str, name: str) -> str:
        try:
            # raw JSON: the client's models refuse objects they find incomplete, and only the uid matters
            response = self.apps.read_namespaced_deployment(name, namespace, _request_timeout=TIMEOUT,
                                                            _preload_content=False)
            # _preload_content=False returns the urllib3 response, not the annotated V1Deployment
            uid = json.loads(response.data)["metadata"]["uid"]  # type: ignore[attr-defined]
        except Exception as e:  # noqa: BLE001
            raise _error(f"Deployment {namespace}/{name}", e) from None
        return str(uid)

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        try:
            # a dict body: the client's validate_call builds the annotated model from it
            self.core.create_namespaced_event(namespace, body,  # type: ignore[arg-type]
                                              _request_timeout=TIMEOUT, _preload_content=False)
        except Exception as e:  # noqa: BLE001
            raise _error(f"create Event in {namespace}", e) from None

    # --- self-managed certificates ----------------------------------------------------------

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The Secret as a plain dict (data base64, as on the wire), or None when absent."""
        try:
            secret = self.core.read_namespaced_secret(name, namespace, _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001
            err = _error(f"Secret {namespace}/{name}", e)
            if err.status == 404:
                return None
            raise err from None
        return _object(f"Secret {namespace}/{name}", self.api.sanitize_for_serialization(secret))

    def create_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create; KubeError status 409 when it already exists (another replica won the race)."""
        what = f"create Secret {namespace}/{body['metadata']['name']}"
        try:
            created = self.core.create_namespaced_secret(namespace, body,  # type: ignore[arg-type]  # as create_event
                                                         _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001
            raise _error(what, e) from None
        return _object(what, self.api.sanitize_for_serialization(created))

    def replace_secret(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        """Update with the body's resourceVersion; KubeError 409 on a concurrent change."""
        name = body["metadata"]["name"]
        try:
            replaced = self.core.replace_namespaced_secret(name, namespace, body,  # type: ignore[arg-type]  # as create_event
                                                           _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001
            raise _error(f"update Secret {namespace}/{name}", e) from None
        return _object(f"update Secret {namespace}/{name}", self.api.sanitize_for_serialization(replaced))

    def get_webhook_configuration(self, name: str) -> tuple[str, dict[str, Any]]:
        """("validating" | "mutating", object). Tries both kinds: RBAC restricted by resourceNames
        answers 403 for the wrong kind, so 403 and 404 both mean "not this kind"."""
        errors = []
        for kind, read in (("validating", self.admission.read_validating_webhook_configuration),
                           ("mutating", self.admission.read_mutating_webhook_configuration)):
            what = f"{kind} webhook configuration {name}"
            try:
                found = read(name, _request_timeout=TIMEOUT)
            except Exception as e:  # noqa: BLE001
                err = _error(what, e)
                if err.status not in (403, 404):
                    raise err from None
                errors.append(err.message)
                continue
            return kind, _object(what, self.api.sanitize_for_serialization(found))
        raise KubeError(404, f"webhook configuration {name} not found or not readable ({'; '.join(errors)})")

    def patch_webhook_configuration(self, kind: str, name: str, patch: list[dict[str, Any]]) -> None:
        """Apply a JSON Patch (a list body makes the client send application/json-patch+json)."""
        call = (self.admission.patch_validating_webhook_configuration if kind == "validating"
                else self.admission.patch_mutating_webhook_configuration)
        try:
            call(name, patch, _request_timeout=TIMEOUT)
        except Exception as e:  # noqa: BLE001
            raise _error(f"patch {kind} webhook configuration {name}", e) from None

"""Kubernetes RBAC evaluation over rendered objects, for one ServiceAccount (enough of the
real authorizer for the requests ch-admission makes: resource requests, resourceNames,
RoleBinding vs ClusterRoleBinding scope; no aggregation, no non-resource URLs)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_CORE = re.compile(r"^/api/v1/(?:namespaces/(?P<ns>[^/]+)/)?(?P<resource>[^/]+)(?:/(?P<name>[^/]+))?$")
_GROUP = re.compile(r"^/apis/(?P<group>[^/]+)/[^/]+/(?:namespaces/(?P<ns>[^/]+)/)?(?P<resource>[^/]+)"
                    r"(?:/(?P<name>[^/]+))?$")
_VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


@dataclass(frozen=True)
class Request:
    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None

    def describe(self, user: str) -> str:
        where = f'in the namespace "{self.namespace}"' if self.namespace else "at the cluster scope"
        obj = f'{self.resource} "{self.name}" is forbidden' if self.name else f"{self.resource} is forbidden"
        return (f'{obj}: User "{user}" cannot {self.verb} resource "{self.resource}" in API group '
                f'"{self.group}" {where}')


def parse(method: str, path: str) -> Request:
    m = _CORE.match(path) or _GROUP.match(path)
    if not m:
        raise ValueError(f"not a resource path: {path}")
    d = m.groupdict()
    verb = _VERBS[method]
    if verb == "get" and not d["name"]:
        verb = "list"
    return Request(verb, d.get("group") or "", d["resource"], d["ns"], d["name"])


class Authorizer:
    def __init__(self, objects: list[dict[str, Any]], namespace: str, service_account: str):
        self.user = f"system:serviceaccount:{namespace}:{service_account}"
        roles = {(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]): o
                 for o in objects if o["kind"] in ("Role", "ClusterRole")}
        self.rules: list[tuple[str | None, dict[str, Any]]] = []  # (namespace or None = everywhere, rule)
        for b in (o for o in objects if o["kind"] in ("RoleBinding", "ClusterRoleBinding")):
            if not any(s["kind"] == "ServiceAccount" and s["name"] == service_account
                       and s.get("namespace") == namespace for s in b["subjects"]):
                continue
            ref = b["roleRef"]
            role_ns = b["metadata"].get("namespace") if ref["kind"] == "Role" else None
            role = roles.get((ref["kind"], role_ns, ref["name"]))
            if role is None:
                continue  # a binding to a missing role grants nothing
            scope = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
            self.rules += [(scope, rule) for rule in role["rules"]]

    def allows(self, req: Request) -> bool:
        for scope, rule in self.rules:
            if scope is not None and req.namespace != scope:
                continue
            if req.group not in rule["apiGroups"] or req.resource not in rule["resources"]:
                continue
            if req.verb not in rule["verbs"]:
                continue
            names = rule.get("resourceNames")
            if names and req.name not in names:
                continue
            return True
        return False

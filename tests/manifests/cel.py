"""Evaluate the manifests' CEL (webhook matchConditions, ValidatingAdmissionPolicies) in Python.

cel-python stands in for the API server's cel-go for the expressions used here (has(), `in`,
map indexing, ==, &&, ||, ternaries, string +). Where it is more lenient than cel-go, namely
has() on a missing intermediate field and on null (cel-go raises an error, which a webhook's
failurePolicy: Fail turns into a refusal of the request), `unguarded_accesses()` checks the text
instead: every field path is guarded level by level with has().
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import celpy

_ENV = celpy.Environment()
_PROGRAMS: dict[str, Any] = {}

RESOURCES = {  # kind -> (group, version, resource) as the API server puts it in request.resource
    "VirtualMachineInstance": ("kubevirt.io", "v1", "virtualmachineinstances"),
    "VirtualMachine": ("kubevirt.io", "v1", "virtualmachines"),
    "VirtualMachineInstanceReplicaSet": ("kubevirt.io", "v1", "virtualmachineinstancereplicasets"),
    "VirtualMachinePool": ("pool.kubevirt.io", "v1beta1", "virtualmachinepools"),
    "VirtualMachineInstanceMigration": ("kubevirt.io", "v1", "virtualmachineinstancemigrations"),
    "Pod": ("", "v1", "pods"),
}


def _program(expression: str):
    if expression not in _PROGRAMS:
        _PROGRAMS[expression] = _ENV.program(_ENV.compile(expression))
    return _PROGRAMS[expression]


def request_for(kind: str, operation: str, namespace: str = "default",
                user: str = "kubernetes-admin") -> dict[str, Any]:
    group, version, resource = RESOURCES[kind]
    return {"operation": operation, "namespace": namespace, "userInfo": {"username": user},
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource}}


def evaluate(expression: str, **activation: Any) -> Any:
    """The expression's value; raises celpy.CELEvalError when evaluation fails."""
    result = _program(expression).evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()})
    if isinstance(result, celpy.CELEvalError):
        raise result
    return result


def webhook_matches(webhook: dict, kind: str, obj: dict, old: dict | None = None,
                    operation: str = "CREATE", namespace: str = "default", user: str = "kubernetes-admin") -> bool:
    """All matchConditions of a webhook are true (the request is sent to the server)."""
    act = {"object": obj, "oldObject": old, "request": request_for(kind, operation, namespace, user)}
    return all(bool(evaluate(c["expression"], **act)) for c in webhook.get("matchConditions", []))


@dataclass(frozen=True)
class PolicyDecision:
    matched: bool      # matchConditions held (the policy looked at the request)
    allowed: bool
    message: str = ""


def policy_decision(policy: dict, kind: str, obj: dict, old: dict | None = None,
                    operation: str = "CREATE", namespace: str = "default") -> PolicyDecision:
    """What a ValidatingAdmissionPolicy decides, as the API server evaluates it: matchConditions,
    then variables in order (each may use the previous ones), then validations in order."""
    spec = policy["spec"]
    act: dict[str, Any] = {"object": obj, "oldObject": old, "request": request_for(kind, operation, namespace)}
    if not all(bool(evaluate(c["expression"], **act)) for c in spec.get("matchConditions", [])):
        return PolicyDecision(matched=False, allowed=True)
    variables: dict[str, Any] = {}
    for var in spec.get("variables", []):
        variables[var["name"]] = evaluate(var["expression"], **act, variables=variables)
        variables[var["name"]] = _plain(variables[var["name"]])
    for rule in spec["validations"]:
        if not bool(evaluate(rule["expression"], **act, variables=variables)):
            message = rule.get("message", "")
            if "messageExpression" in rule:
                message = str(evaluate(rule["messageExpression"], **act, variables=variables))
            return PolicyDecision(matched=True, allowed=False, message=message)
    return PolicyDecision(matched=True, allowed=True)


def _plain(value: Any) -> Any:
    return bool(value) if isinstance(value, celpy.celtypes.BoolType) else value


_HAS = re.compile(r"has\(\s*((?:object|oldObject)(?:\.\w+)+)\s*\)")
_PATH = re.compile(r"\b((?:object|oldObject)(?:\.\w+)+)")
_UPDATE_GUARD = re.compile(r"request\.operation\s*==\s*'UPDATE'\s*&&")


def unguarded_accesses(expression: str) -> list[str]:
    """Field paths the expression reads without first testing each level with has().

    `object.metadata` is always present (the API server fills it), so it needs no guard; every
    other level does: `has(object.spec.template)` needs `has(object.spec)`, and reading
    `object.spec.template.metadata.annotations` needs has() of it and of each level above it.
    """
    guarded = set(_HAS.findall(expression))
    problems = set()
    for path in _PATH.findall(expression):
        parts = path.split(".")
        # has(p) itself only needs p's parent; a read needs p and everything above it
        needed = parts[:-1] if path in guarded else parts
        for depth in range(2, len(needed) + 1):
            prefix = ".".join(needed[:depth])
            if depth == 2 and needed[1] == "metadata":
                continue
            if prefix not in guarded:
                problems.add(f"{path}: {prefix} is read without has({prefix})")
    return sorted(problems)


def old_object_outside_update(expression: str) -> list[str]:
    """Problems with reads of oldObject (null on CREATE) that are not under an UPDATE guard.

    Each `request.operation == 'UPDATE' && ...` must open its group: it stands at the start of the
    expression (guarding all of it) or right after a "(" (guarding that group). Those parts are
    blanked out; any oldObject left is unguarded.
    """
    text, problems = expression, []
    while (m := _UPDATE_GUARD.search(text)) is not None:
        before = text[:m.start()].rstrip()
        if not before:
            text = ""
            break
        if not before.endswith("("):
            problems.append(f"the UPDATE guard at {before[-30:]!r}... does not open a group")
            text = text[:m.start()] + text[m.end():]
            continue
        start, depth = len(before) - 1, 0
        for end in range(start, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[:start] + text[end + 1:]
    if "oldObject" in text:
        problems.append("oldObject is read outside an UPDATE guard")
    return problems

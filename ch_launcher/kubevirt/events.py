"""Kubernetes events about a VMI as the launcher hands them to virt-handler (Notify's
`HandleK8sEvent`, contract §2.5): the launcher's Notify client and the monitor's last word
(`ch_launcher.epitaph`) both send them. Standard library only."""

from __future__ import annotations

import json
import uuid as uuidlib

from ch_launcher.kubevirt.domain_view import now_rfc3339

K8S_EVENT_TYPES = ("Normal", "Warning")


def k8s_event_json(*, type: str, reason: str,  # noqa: A002 - the Event's field; callers pass type=
                   message: str, namespace: str, name: str, uid: str,
                   component: str = "ch-launcher") -> bytes:
    """A `core/v1 Event` about the VMI, as virt-handler's HandleK8sEvent expects it: it re-emits
    the event only for a VMI in its cache with `involvedObject` namespace, name and uid."""
    if type not in K8S_EVENT_TYPES:
        raise ValueError(f"Kubernetes event type must be one of {K8S_EVENT_TYPES}, not {type!r}")
    if not (namespace and name and uid):
        raise ValueError("a Kubernetes event needs the VMI's namespace, name and uid")
    now = now_rfc3339()
    event = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": f"{name}.{uuidlib.uuid4().hex[:16]}", "namespace": namespace,
                     "creationTimestamp": None},
        "involvedObject": {"kind": "VirtualMachineInstance", "namespace": namespace, "name": name,
                           "uid": uid, "apiVersion": "kubevirt.io/v1"},
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "type": type,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": "",
    }
    return json.dumps(event, separators=(",", ":")).encode()

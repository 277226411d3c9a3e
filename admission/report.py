"""Tell operators about the cluster-wide conditions (`cluster.conditions()`), where they look.

Every time the server reads the KubeVirt CR (at start-up, then every few minutes, and when a
webhook needs a fresh value), `ConditionReporter.update()` compares the conditions that hold
with the previous ones and

- sets the gauge `ch_admission_cluster_condition{condition}` (1 holds, 0 not) for every
  condition name, so an alert can fire on it;
- logs each condition that starts to hold (WARNING, with its message) and each that stops (INFO);
- returns the Kubernetes Events to post for those changes: type Warning, reason = the condition's
  name, on the server's own Deployment (`kubectl describe deployment -n kubevirt-ch ch-admission`,
  `kubectl get events -n kubevirt-ch`); type Normal, reason `<name>Resolved`, when it stops.

`post_events()` sends them (blocking: the server runs it in its thread pool). An Event that cannot
be posted is logged and dropped: the log and the metric carry the same news. Each replica reports
on its own (two replicas: two Events per change).
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client import Gauge

from admission.cluster import CONDITIONS, Condition
from admission.kube import KubeClient, KubeError

log = logging.getLogger("admission")
COMPONENT = "ch-admission"


@dataclass(frozen=True)
class Event:
    type: str  # "Warning" | "Normal"
    reason: str
    message: str


class ConditionReporter:
    """Remembers which conditions held at the last update. Not thread-safe: call from the loop."""

    def __init__(self, gauge: Gauge):
        self.gauge = gauge
        self.holding: dict[str, Condition] = {}
        for name in CONDITIONS:
            gauge.labels(name).set(0)

    def update(self, found: Iterable[Condition]) -> list[Event]:
        now = {c.name: c for c in found}
        events: list[Event] = []
        for name in CONDITIONS:
            self.gauge.labels(name).set(1 if name in now else 0)
        for name, c in now.items():
            before = self.holding.get(name)
            if before is None or before.message != c.message:
                log.warning("cluster condition %s: %s", name, c.message)
                events.append(Event("Warning", name, c.message))
        for name, c in self.holding.items():
            if name not in now:
                log.info("cluster condition %s no longer holds (was: %s)", name, c.message)
                events.append(Event("Normal", f"{name}Resolved", f"no longer: {c.message}"))
        self.holding = now
        return events


class EventPoster:
    """Posts core/v1 Events about the Deployment `namespace/deployment` (its uid read once, so that
    `kubectl describe deployment` lists them; without it they are still in `kubectl get events`)."""

    def __init__(self, kube: KubeClient, namespace: str, deployment: str):
        self.kube, self.namespace, self.deployment = kube, namespace, deployment
        self._uid: str | None = None
        self.host = os.environ.get("HOSTNAME") or socket.gethostname()

    def post(self, events: Sequence[Event]) -> None:
        for event in events:
            try:
                self.kube.create_event(self.namespace, self._body(event))
            except KubeError as e:
                log.warning("cannot post the Event %s about deployment %s/%s: %s", event.reason, self.namespace,
                            self.deployment, e.message)

    def _involved(self) -> dict[str, Any]:
        if self._uid is None:
            try:
                self._uid = self.kube.get_deployment_uid(self.namespace, self.deployment)
            except KubeError as e:
                log.debug("Events go without the Deployment's uid: %s", e.message)
        ref = {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": self.namespace, "name": self.deployment}
        if self._uid:
            ref["uid"] = self._uid
        return ref

    def _body(self, event: Event) -> dict[str, Any]:
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": f"{self.deployment}.", "namespace": self.namespace},
                "involvedObject": self._involved(), "type": event.type, "reason": event.reason,
                "message": event.message, "source": {"component": COMPONENT, "host": self.host},
                "firstTimestamp": now, "lastTimestamp": now, "count": 1}

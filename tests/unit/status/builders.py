"""Builders of raw CollaSet and pod dicts (as the API server sends them) for the status view tests."""

from __future__ import annotations

from typing import Any

from lifecycle import labels as lc

UID = "cls-uid"
OLD = "web-old"
NEW = "web-new"
UPDATE = lc.OperationId("collaset-update")


def condition(kind: str, status: str, reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def hook(name: str, point: int, phase: str, *, job: str | None = None, revision: str = NEW) -> dict[str, Any]:
    record: dict[str, Any] = {"name": name, "revision": revision, "point": point, "phase": phase}
    if job:
        record["jobName"] = job
    return record


def collaset(
    *,
    replicas: int = 4,
    generation: int = 2,
    observed: int | None = 2,
    current: str | None = NEW,
    updated_revision: str | None = NEW,
    live: int | None = None,
    updated: int | None = None,
    available: int | None = None,
    operating: int = 0,
    conditions: list[dict[str, str]] | None = None,
    hooks: list[dict[str, Any]] | None = None,
    paused: bool = False,
    status: bool = True,
) -> dict[str, Any]:
    """A CollaSet; by default its rollout to NEW is complete."""
    body: dict[str, Any] = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "CollaSet",
        "metadata": {"name": "web", "namespace": "ns", "uid": UID, "generation": generation},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}}, "paused": paused},
    }
    if status:
        live = replicas if live is None else live
        updated = replicas if updated is None else updated
        available = updated if available is None else available
        body["status"] = {
            "observedGeneration": observed,
            "currentRevision": current,
            "updatedRevision": updated_revision,
            "replicas": live,
            "readyReplicas": live,
            "availableReplicas": live,
            "updatedReplicas": updated,
            "updatedReadyReplicas": available,
            "updatedAvailableReplicas": available,
            "operatingReplicas": operating,
            "conditions": conditions or [],
            "hooks": hooks or [],
        }
    return body


def rolling(*, updated: int, available: int, **kwargs: Any) -> dict[str, Any]:
    """A CollaSet in the middle of its rollout from OLD to NEW."""
    message = f"{updated}/4 updated, waiting for pod web-b to pass PreCheck"
    defaults: dict[str, Any] = {
        "current": OLD,
        "updated": updated,
        "available": available,
        "conditions": [condition("Update", "False", "Updating", message)],
    }
    return collaset(**{**defaults, **kwargs})


def pod(
    name: str,
    *,
    revision: str = NEW,
    ready: bool = True,
    available: bool = True,
    phase_labels: dict[str, str] | None = None,
    owner: str = UID,
    deleting: bool = False,
) -> dict[str, Any]:
    labels = {"app": "web", "controller-revision-hash": revision, **(phase_labels or {})}
    if available:
        labels[lc.SERVICE_AVAILABLE] = "1"
    meta: dict[str, Any] = {
        "name": name,
        "labels": labels,
        "ownerReferences": [{"kind": "CollaSet", "uid": owner, "controller": True, "name": "web"}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": meta,
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def in_phase(*prefixes: str, op_type: str = "update") -> dict[str, str]:
    """The labels of an update operation that reached ``prefixes`` (e.g. pre-check, preparing)."""
    labels = {
        lc.id_key(lc.OPERATING, UPDATE): "1",
        lc.id_key(lc.OPERATION_TYPE, UPDATE): op_type,
    }
    labels.update({lc.id_key(p, UPDATE): "1" for p in prefixes})
    return labels

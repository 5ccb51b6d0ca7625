"""Builders shared by the CollaSet planning tests: specs, templates, pods in lifecycle states."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from lifecycle import labels as lc
from rollouts.api.collasets import REVISION_LABEL, CollaSetSpec
from rollouts.planning.updating import SCALE_IN_ID, UPDATE_ID, CollaSetSnapshot, PodView, Rejection

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
OLD = "web-old"
NEW = "web-new"


def template(
    image: str = "nginx:1.0", *, env: str | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": image}
    if env is not None:
        container["env"] = [{"name": "MODE", "value": env}]
    return {"metadata": {"labels": labels or {"app": "web"}}, "spec": {"containers": [container]}}


def spec(replicas: int = 4, **fields: Any) -> CollaSetSpec:
    raw: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": template("nginx:2.0"),
        **fields,
    }
    return CollaSetSpec.model_validate(raw)


def partition(value: int | None, **fields: Any) -> dict[str, Any]:
    return {"updateStrategy": {"rollingUpdate": {"byPartition": {"partition": value}}, **fields}}


def nanos(at: datetime) -> str:
    return str(int(at.timestamp() * 1_000_000_000))


def op_labels(op_id: str, op_type: str, stage: str, *, since: datetime = NOW) -> dict[str, str]:
    """Lifecycle labels of one operation at ``stage``: begun, pre-checked, preparing, operate."""
    labels = {lc.id_key(lc.OPERATING, op_id): nanos(since), lc.id_key(lc.OPERATION_TYPE, op_id): op_type}
    if stage == "begun":
        labels[lc.id_key(lc.PRE_CHECK, op_id)] = nanos(since)
    if stage in ("pre-checked", "preparing", "operate"):
        labels[lc.id_key(lc.PRE_CHECKED, op_id)] = nanos(since)
    if stage == "preparing":
        labels[lc.id_key(lc.PREPARING, op_id)] = nanos(since)
    if stage == "operate":
        labels[lc.id_key(lc.OPERATE, op_id)] = nanos(since)
    return labels


def updating(stage: str, *, since: datetime = NOW) -> dict[str, str]:
    return op_labels(UPDATE_ID, lc.UPDATE, stage, since=since)


def scaling_in(stage: str, *, since: datetime = NOW) -> dict[str, str]:
    return op_labels(SCALE_IN_ID, lc.SCALE_IN, stage, since=since)


def pod(
    name: str,
    revision: str | None = OLD,
    *,
    available: bool = True,
    ready: bool = True,
    age: int = 100,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    image: str | None = None,
    status_image: str | None = None,
    image_id: str = "sha256:old",
    terminating: bool = False,
) -> PodView:
    all_labels = {"app": "web", **({REVISION_LABEL: revision} if revision else {})}
    if available:
        all_labels[lc.SERVICE_AVAILABLE] = nanos(NOW)
    all_labels.update(labels or {})
    spec_image = image or ("nginx:2.0" if revision == NEW else "nginx:1.0")
    return PodView(
        name=name,
        uid=f"uid-{name}",
        resource_version="1",
        revision=revision,
        labels=all_labels,
        annotations=annotations or {},
        ready=ready,
        terminating=terminating,
        created=NOW - timedelta(seconds=age),
        images={"app": spec_image},
        status_images={"app": status_image or spec_image},
        image_ids={"app": image_id},
    )


def snapshot(
    collaset_spec: CollaSetSpec,
    pods: list[PodView],
    *,
    current: str | None = OLD,
    updated: str = NEW,
    templates: dict[str, dict[str, Any]] | None = None,
    now: datetime = NOW,
    rejections: dict[str, list[Rejection]] | None = None,
) -> CollaSetSnapshot:
    return CollaSetSnapshot(
        name="web",
        namespace="ns",
        spec=collaset_spec,
        updated_revision=updated,
        current_revision=current,
        templates=templates
        if templates is not None
        else {OLD: template("nginx:1.0"), NEW: template("nginx:2.0")},
        pods=pods,
        now=now,
        rejections=rejections or {},
    )

"""Small builders shared by the PodTransitionRule unit tests."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from lifecycle import labels
from lifecycle.rules.evaluating import PodView
from lifecycle.rules.models import PodDetail, PodTransitionRule, PodTransitionRuleStatus, Stage

FIXTURES = Path(__file__).parent / "fixtures"
SAMPLE = FIXTURES / "podtransitionrule-sample.yaml"
NOW = datetime(2024, 10, 10, 12, 0, 0, tzinfo=UTC)
PRE = Stage.PRE_CHECK
POST = Stage.POST_CHECK


def load_sample() -> dict[str, Any]:
    document = yaml.safe_load(SAMPLE.read_text())
    assert isinstance(document, dict)
    return document


def pod(
    name: str,
    *,
    stage: Stage | None = PRE,
    available: bool = True,
    operating: bool = True,
    extra_labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    manifest: dict[str, Any] | None = None,
    namespace: str = "default",
) -> PodView:
    """A selected pod (app=foo); operating pods carry an ``operating.../<id>`` label."""
    pod_labels = {"app": "foo", **(extra_labels or {})}
    if available:
        pod_labels[labels.SERVICE_AVAILABLE] = "1700000000000000000"
    if operating:
        pod_labels[labels.id_key(labels.OPERATING, "collaset")] = "1700000000000000000"
    return PodView(
        name=name,
        namespace=namespace,
        labels=pod_labels,
        annotations=annotations or {},
        stage=stage,
        available=available,
        manifest=manifest or {},
    )


def ptr(*rules: dict[str, Any], name: str = "ptr", generation: int | None = 1) -> PodTransitionRule:
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if generation is not None:
        metadata["generation"] = generation
    return PodTransitionRule.model_validate(
        {
            "apiVersion": "apps.kusionstack.io/v1alpha1",
            "kind": "PodTransitionRule",
            "metadata": metadata,
            "spec": {"selector": {"matchLabels": {"app": "foo"}}, "rules": list(rules)},
        }
    )


def budget(name: str = "budget", *, stage: str = "PreCheck", **policy: Any) -> dict[str, Any]:
    return {"name": name, "stage": stage, "availablePolicy": policy}


def label_check(name: str = "labels", *, stage: str = "PreCheck", **requires: Any) -> dict[str, Any]:
    return {"name": name, "stage": stage, "labelCheck": {"requires": requires}}


def webhook(
    name: str = "hook",
    *,
    stage: str = "PreCheck",
    url: str = "http://127.0.0.1:9/check",
    poll: dict[str, Any] | None = None,
    failure_policy: str = "Fail",
    parameters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    client: dict[str, Any] = {"url": url}
    if poll is not None:
        client["poll"] = poll
    return {
        "name": name,
        "stage": stage,
        "webhook": {"clientConfig": client, "failurePolicy": failure_policy, "parameters": parameters or []},
    }


def status_with(*details: PodDetail) -> PodTransitionRuleStatus:
    return PodTransitionRuleStatus(details=details)


def approved(name: str, *rules: str, stage: Stage = PRE, passed: bool = True) -> PodDetail:
    return PodDetail(name=name, stage=stage, passed=passed, passed_rules=rules)

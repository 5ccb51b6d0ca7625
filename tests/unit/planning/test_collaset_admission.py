"""rollouts.api.validating and the CollaSet models: every admission rule, defaults, the schema shape."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from hooks.models import DEFAULT_HOOK_DEADLINE_SECONDS, FailurePolicy, RetainPolicy
from rollouts.api.collasets import CollaSet, PodUpdatePolicy
from rollouts.api.validating import default_collaset, validate_collaset


def valid() -> dict[str, Any]:
    return {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "CollaSet",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {
            "replicas": 4,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]},
            },
            "updateStrategy": {"rollingUpdate": {"byPartition": {"partition": 1}, "maxUnavailable": "25%"}},
            "lifecycleHooks": [
                {
                    "name": "db-migrate",
                    "trigger": {"type": "ProgressAvailable", "progressAvailableParams": {"progressPoint": 0}},
                    "jobSpec": {"template": {"spec": {"containers": [{"name": "m", "image": "migrate"}]}}},
                },
                {
                    "name": "smoke",
                    "trigger": {"progressAvailableParams": {"progressPoint": "50%"}},
                    "failurePolicy": "Ignore",
                    "retainPolicy": "Never",
                    "jobSpec": {
                        "template": {
                            "spec": {
                                "restartPolicy": "OnFailure",
                                "containers": [{"name": "s", "image": "smoke"}],
                            }
                        }
                    },
                },
            ],
        },
    }


def with_change(path: str, value: Any) -> dict[str, Any]:
    """A valid object with the value at dotted ``path`` (ints index lists) set, or removed when ``...``."""
    obj = valid()
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in path.split(".")]
    target: Any = obj
    for part in parts[:-1]:
        target = target[part]
    if value is ...:
        del target[parts[-1]]
    else:
        target[parts[-1]] = value
    return obj


def test_valid_object_passes() -> None:
    assert validate_collaset(valid()) == []


HOOK0 = "spec.lifecycleHooks.0"
H0 = "spec.lifecycleHooks[0]"
POINT = f"{H0}.trigger.progressAvailableParams.progressPoint"
POLICY = "spec.updateStrategy.podUpdatePolicy"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        pytest.param(
            "spec.replicas", -1, "spec.replicas: must be at least 0 (got -1)", id="negative-replicas"
        ),
        pytest.param(
            "spec.updateStrategy.rollingUpdate.byPartition.partition",
            -2,
            "spec.updateStrategy.rollingUpdate.byPartition.partition: must be at least 0 (got -2)",
            id="negative-partition",
        ),
        pytest.param(
            "spec.updateStrategy.operationDelaySeconds",
            -5,
            "spec.updateStrategy.operationDelaySeconds: must be at least 0 (got -5)",
            id="negative-update-delay",
        ),
        pytest.param(
            "spec.scaleStrategy",
            {"operationDelaySeconds": -1},
            "spec.scaleStrategy.operationDelaySeconds: must be at least 0 (got -1)",
            id="negative-scale-delay",
        ),
        pytest.param(
            "spec.historyLimit", -1, "spec.historyLimit: must be at least 0 (got -1)", id="negative-history"
        ),
        pytest.param(
            "spec.updateStrategy.podUpdatePolicy",
            "Replace",
            f"{POLICY}: must be 'InPlaceIfPossible', 'InPlaceOnly' or 'Recreate'",
            id="unknown-update-policy",
        ),
        pytest.param(
            f"{HOOK0}.failurePolicy",
            "Retry",
            "spec.lifecycleHooks[0].failurePolicy: must be 'Abort' or 'Ignore' (got 'Retry')",
            id="unknown-failure-policy",
        ),
        pytest.param(
            f"{HOOK0}.retainPolicy",
            "Sometimes",
            "spec.lifecycleHooks[0].retainPolicy: must be 'Always', 'OnFailure' or 'Never'",
            id="unknown-retain-policy",
        ),
        pytest.param(
            f"{HOOK0}.trigger.type",
            "Manual",
            "spec.lifecycleHooks[0].trigger.type: must be 'ProgressAvailable'",
            id="unknown-trigger",
        ),
        pytest.param(
            f"{HOOK0}.jobSpec",
            ...,
            "spec.lifecycleHooks[0].jobSpec: required; a hook runs a Job created from it",
            id="missing-jobspec",
        ),
        pytest.param(
            f"{HOOK0}.jobSpec",
            {},
            f"{H0}.jobSpec.template.spec.containers: required; the hook Job needs at least one",
            id="empty-jobspec",
        ),
        pytest.param(
            f"{HOOK0}.jobSpec.template.spec.restartPolicy",
            "Always",
            f"{H0}.jobSpec.template.spec.restartPolicy: a Job's pods need Never or OnFailure",
            id="job-restart-always",
        ),
        pytest.param(
            f"{HOOK0}.jobSpec.activeDeadlineSeconds",
            0,
            "spec.lifecycleHooks[0].jobSpec.activeDeadlineSeconds: must be a positive number of seconds",
            id="job-deadline-zero",
        ),
        pytest.param(
            f"{HOOK0}.activeDeadlineSeconds",
            0,
            "spec.lifecycleHooks[0].activeDeadlineSeconds: must be at least 1 (got 0)",
            id="hook-deadline-zero",
        ),
        pytest.param(
            "spec.lifecycleHooks.1.name",
            "db-migrate",
            "spec.lifecycleHooks[1].name: duplicate hook name 'db-migrate' (also spec.lifecycleHooks[0]); "
            "hook names must be unique",
            id="duplicate-hook-names",
        ),
        pytest.param(
            f"{HOOK0}.name",
            "DB_Migrate",
            "spec.lifecycleHooks[0].name: 'DB_Migrate' is not a DNS label",
            id="hook-name-not-dns",
        ),
        pytest.param(
            f"{HOOK0}.trigger.progressAvailableParams.progressPoint",
            "150%",
            f"{POINT}: 150% is above 100%",
            id="percent-above-100",
        ),
        pytest.param(
            f"{HOOK0}.trigger.progressAvailableParams.progressPoint",
            5,
            f"{POINT}: 5 is above spec.replicas (4)",
            id="point-above-replicas",
        ),
        pytest.param(
            f"{HOOK0}.trigger.progressAvailableParams.progressPoint",
            -1,
            f"{POINT}: must not be negative",
            id="negative-point",
        ),
        pytest.param(
            f"{HOOK0}.trigger.progressAvailableParams.progressPoint",
            "half",
            f"{POINT}: must be a number of pods or a percentage like '50%' (got 'half')",
            id="point-not-percent",
        ),
        pytest.param(
            f"{HOOK0}.trigger",
            {"type": "ProgressAvailable"},
            f"{H0}.trigger.progressAvailableParams: required for trigger type ProgressAvailable",
            id="missing-trigger-params",
        ),
        pytest.param(
            "spec.selector",
            {"matchLabels": {"app": "api"}},
            "spec.selector: does not match spec.template.metadata.labels",
            id="selector-mismatch",
        ),
        pytest.param("spec.selector", {}, "spec.selector: must not be empty", id="empty-selector"),
        pytest.param("spec.selector", ..., "spec.selector: required", id="missing-selector"),
        pytest.param(
            "spec.template.metadata",
            {},
            "spec.template.metadata.labels: required; the selector must match them",
            id="template-without-labels",
        ),
        pytest.param(
            "spec.template.spec.containers",
            [],
            "spec.template.spec.containers: required; a pod needs at least one container",
            id="no-containers",
        ),
        pytest.param(
            "spec.updateStrategy.rollingUpdate.byLabel",
            {},
            "spec.updateStrategy.rollingUpdate: set either byPartition or byLabel, not both",
            id="both-strategies",
        ),
        pytest.param(
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
            0,
            "spec.updateStrategy.rollingUpdate.maxUnavailable: must not be 0",
            id="max-unavailable-0",
        ),
        pytest.param(
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
            "0%",
            "spec.updateStrategy.rollingUpdate.maxUnavailable: must not be 0",
            id="max-unavailable-0-percent",
        ),
        pytest.param(
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
            "120%",
            "spec.updateStrategy.rollingUpdate.maxUnavailable: 120% is above 100%",
            id="max-unavailable-above-100",
        ),
        pytest.param(
            "spec.updateStrategy.rollingUpdate.maxUnavailable",
            -1,
            "spec.updateStrategy.rollingUpdate.maxUnavailable: must not be negative",
            id="max-unavailable-negative",
        ),
        pytest.param("spec.replicaCount", 3, "spec.replicaCount: unknown field", id="unknown-field"),
        pytest.param("metadata.name", "w" * 53, "metadata.name: 53 characters is too long", id="long-name"),
        pytest.param(
            "metadata.name",
            "w" * 48,
            "metadata.name: 48 characters is too long with spec.updateStrategy.rollingUpdate.maxUnavailable; "
            "at most 47 so the default PodTransitionRule <name>-max-unavailable fits a pod annotation key",
            id="name-too-long-for-the-default-rule",
        ),
    ],
)
def test_admission_rule(path: str, value: Any, message: str) -> None:
    messages = validate_collaset(with_change(path, value))
    assert any(m.startswith(message) for m in messages), messages


def test_long_name_is_fine_without_max_unavailable() -> None:
    obj = with_change("metadata.name", "w" * 52)
    del obj["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"]
    assert validate_collaset(obj) == []
    assert validate_collaset(with_change("metadata.name", "w" * 47)) == []


def test_all_problems_reported_at_once() -> None:
    obj = with_change("spec.lifecycleHooks.1.name", "db-migrate")
    obj["spec"]["lifecycleHooks"][0]["trigger"]["progressAvailableParams"]["progressPoint"] = "101%"
    obj["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    assert len(validate_collaset(obj)) == 3


def test_defaults_fill_nested_fields_without_touching_given_ones() -> None:
    obj = valid()
    before = copy.deepcopy(obj)
    patch = default_collaset(obj)
    assert obj == before
    paths = {op["path"]: op["value"] for op in patch}
    assert all(op["op"] == "add" for op in patch)
    assert paths["/spec/historyLimit"] == 20
    assert paths["/spec/updateStrategy/podUpdatePolicy"] == "InPlaceIfPossible"
    assert paths["/spec/lifecycleHooks/0/failurePolicy"] == "Abort"
    assert paths["/spec/lifecycleHooks/0/retainPolicy"] == "Always"
    assert paths["/spec/lifecycleHooks/0/activeDeadlineSeconds"] == DEFAULT_HOOK_DEADLINE_SECONDS
    assert paths["/spec/lifecycleHooks/1/trigger/type"] == "ProgressAvailable"
    assert "/spec/lifecycleHooks/1/failurePolicy" not in paths  # given: Ignore
    assert not any(p.startswith("/spec/template") for p in paths)


def test_defaults_skip_unparseable_objects() -> None:
    assert default_collaset(with_change("spec.replicas", "many")) == []
    assert default_collaset({"metadata": {}}) == []


def test_model_defaults() -> None:
    spec = CollaSet.model_validate(valid()).spec
    assert spec.history_limit == 20
    assert spec.update_strategy.pod_update_policy == PodUpdatePolicy.IN_PLACE_IF_POSSIBLE
    assert spec.lifecycle_hooks[0].failure_policy == FailurePolicy.ABORT
    assert spec.lifecycle_hooks[0].retain_policy == RetainPolicy.ALWAYS
    assert spec.update_cap == 3
    assert CollaSet.model_validate(with_change("spec.updateStrategy", ...)).spec.update_cap == 4


def test_schema_is_flat_enough_for_the_crd_generator() -> None:
    schema = CollaSet.model_json_schema(by_alias=True)
    spec = schema["$defs"]["CollaSetSpec"]["properties"]
    assert spec["template"]["x-kubernetes-preserve-unknown-fields"] is True
    assert (
        schema["$defs"]["LifecycleHook"]["properties"]["jobSpec"]["x-kubernetes-preserve-unknown-fields"]
        is True
    )
    max_unavailable = schema["$defs"]["RollingUpdate"]["properties"]["maxUnavailable"]
    assert '"x-kubernetes-int-or-string": true' in json.dumps(max_unavailable)  # inside the nullable anyOf
    assert spec["historyLimit"]["default"] == 20
    status = schema["$defs"]["CollaSetStatus"]["properties"]
    for field in ("hooks", "hookPhase", "updatedAvailableReplicas", "collisionCount", "operatingReplicas"):
        assert field in status
    for name, definition in schema["$defs"].items():  # no definition refers to itself
        assert f'"#/$defs/{name}"' not in json.dumps(definition), name


def test_status_round_trips() -> None:
    status = {
        "observedGeneration": 3,
        "currentRevision": "web-a",
        "updatedRevision": "web-b",
        "hooks": [
            {
                "name": "smoke",
                "revision": "web-b",
                "point": 2,
                "phase": "Running",
                "jobName": "web-smoke-1234abcd",
                "startTime": "2024-05-01T12:00:00Z",
            }
        ],
        "hookPhase": "Running smoke",
        "conditions": [{"type": "Failed", "status": "False", "reason": "NoFailure"}],
    }
    parsed = CollaSet.model_validate({**valid(), "status": status})
    assert parsed.status is not None
    assert parsed.to_api()["status"]["hooks"][0]["startTime"] == "2024-05-01T12:00:00Z"

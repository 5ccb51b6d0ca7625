"""hooks.rendering: Job manifests (names, env, labels, owner, deadline) and Job classification."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from hook_builders import make_hook

from hooks.models import HookPhase, RolloutType
from hooks.rendering import (
    COLLASET_LABEL,
    ENV_FROM,
    ENV_TO,
    ENV_TYPE,
    HOOK_LABEL,
    REVISION_LABEL,
    classify_job,
    name_job,
    render_job,
    view_job,
)

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def render(spec: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    hook = make_hook("db-migrate", "50%", spec=spec, **kwargs)
    return render_job(
        collaset="web",
        namespace="shop",
        hook=hook,
        point=2,
        from_revision="web-aaa",
        to_revision="web-bbb",
        rollout_type=RolloutType.ROLLOUT,
        owner_revision_uid="uid-bbb",
    )


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item.get("value", "") for item in container["env"]}


def test_env_injected_into_containers_and_init_containers() -> None:
    spec = {
        "template": {
            "spec": {
                "initContainers": [{"name": "init", "image": "x"}],
                "containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y", "env": []}],
            }
        }
    }
    pod = render(spec)["spec"]["template"]["spec"]
    expected = {ENV_FROM: "shop/web-aaa", ENV_TO: "shop/web-bbb", ENV_TYPE: "ROLLOUT"}
    for container in [*pod["initContainers"], *pod["containers"]]:
        assert env_of(container) == expected, container["name"]


def test_user_env_values_are_kept() -> None:
    user = [{"name": ENV_TYPE, "value": "CUSTOM"}, {"name": "OTHER", "value": "1"}]
    spec = {"template": {"spec": {"containers": [{"name": "a", "image": "x", "env": user}]}}}
    env = render(spec)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[:2] == user
    assert [item["name"] for item in env].count(ENV_TYPE) == 1
    assert env_of({"env": env})[ENV_FROM] == "shop/web-aaa"


def test_user_env_from_value_from_is_kept() -> None:
    user = [{"name": ENV_FROM, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    spec = {"template": {"spec": {"containers": [{"name": "a", "image": "x", "env": user}]}}}
    env = render(spec)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == user[0]
    assert [item["name"] for item in env] == [ENV_FROM, ENV_TO, ENV_TYPE]


def test_rendering_does_not_touch_the_hook() -> None:
    spec = {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}}
    hook = make_hook("h", 0, spec=spec)
    before = copy.deepcopy(hook.job_spec)
    render_job(
        collaset="web",
        namespace="ns",
        hook=hook,
        point=0,
        from_revision="a",
        to_revision="b",
        rollout_type=RolloutType.ROLLBACK,
        owner_revision_uid="u",
    )
    assert hook.job_spec == before


@pytest.mark.parametrize(
    ("spec_extra", "hook_deadline", "expected"),
    [
        pytest.param({}, None, 600, id="default-hook-deadline"),
        pytest.param({}, 120, 120, id="hook-deadline"),
        pytest.param({"activeDeadlineSeconds": 30}, 120, 30, id="jobspec-deadline-wins"),
    ],
)
def test_active_deadline(spec_extra: dict[str, Any], hook_deadline: int | None, expected: int) -> None:
    spec = {"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}, **spec_extra}
    assert render(spec, deadline=hook_deadline)["spec"]["activeDeadlineSeconds"] == expected


@pytest.mark.parametrize(
    ("given", "expected"),
    [pytest.param(None, "Never", id="defaulted"), pytest.param("OnFailure", "OnFailure", id="kept")],
)
def test_restart_policy(given: str | None, expected: str) -> None:
    pod: dict[str, Any] = {"containers": [{"name": "a", "image": "x"}]}
    if given:
        pod["restartPolicy"] = given
    assert render({"template": {"spec": pod}})["spec"]["template"]["spec"]["restartPolicy"] == expected


def test_metadata_labels_owner_and_point() -> None:
    job = render({"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}})
    meta = job["metadata"]
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    assert meta["namespace"] == "shop"
    assert meta["name"] == name_job(collaset="web", hook="db-migrate", revision="web-bbb")
    assert meta["labels"] == {COLLASET_LABEL: "web", HOOK_LABEL: "db-migrate", REVISION_LABEL: "web-bbb"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ControllerRevision",
            "name": "web-bbb",
            "uid": "uid-bbb",
            "controller": True,
        }
    ]
    assert meta["annotations"]["rollouts.kusionstack.io/progress-point"] == "2"


@pytest.mark.parametrize(
    ("collaset", "hook", "revision"),
    [
        pytest.param("web", "db-migrate", "web-7f9c5d", id="short"),
        pytest.param("w" * 52, "h" * 63, "w" * 52 + "-1234567890", id="longest-allowed"),
        pytest.param("a" * 40, "b-" * 10, "r", id="cut-at-dash"),
        pytest.param("web.shop", "x", "web.shop-1", id="dotted-collaset"),
    ],
)
def test_job_names_are_deterministic_and_fit(collaset: str, hook: str, revision: str) -> None:
    name = name_job(collaset=collaset, hook=hook, revision=revision)
    assert name == name_job(collaset=collaset, hook=hook, revision=revision)
    assert len(name) <= 63
    assert DNS_LABEL.match(name), name
    assert name != name_job(collaset=collaset, hook=hook, revision=revision + "x")


def test_job_name_is_readable_when_short() -> None:
    name = name_job(collaset="web", hook="db-migrate", revision="web-7f9c")
    assert re.fullmatch(r"web-db-migrate-[0-9a-f]{8}", name)


def test_job_names_do_not_collide_on_dashes() -> None:
    assert name_job(collaset="a-b", hook="c", revision="r") != name_job(
        collaset="a", hook="b-c", revision="r"
    )


def job_with(*conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    return {"status": {"conditions": list(conditions), **status}}


@pytest.mark.parametrize(
    ("job", "phase", "reason"),
    [
        pytest.param({}, HookPhase.RUNNING, "", id="no-status"),
        pytest.param(job_with(active=1), HookPhase.RUNNING, "", id="active"),
        pytest.param(
            job_with({"type": "Complete", "status": "False"}), HookPhase.RUNNING, "", id="complete-false"
        ),
        pytest.param(
            job_with({"type": "Complete", "status": "True"}, completionTime="2024-05-01T12:00:00Z"),
            HookPhase.SUCCEEDED,
            "",
            id="complete",
        ),
        pytest.param(
            job_with({"type": "SuccessCriteriaMet", "status": "True"}),
            HookPhase.SUCCEEDED,
            "",
            id="success-criteria",
        ),
        pytest.param(
            job_with(
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "too many"}
            ),
            HookPhase.FAILED,
            "BackoffLimitExceeded",
            id="backoff",
        ),
        pytest.param(
            job_with(
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "past deadline"}
            ),
            HookPhase.FAILED,
            "DeadlineExceeded",
            id="deadline",
        ),
        pytest.param(
            job_with({"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}),
            HookPhase.FAILED,
            "DeadlineExceeded",
            id="failure-target",
        ),
    ],
)
def test_classify_job(job: dict[str, Any], phase: HookPhase, reason: str) -> None:
    outcome = classify_job(job)
    assert outcome.phase == phase
    assert outcome.reason == reason
    if phase == HookPhase.FAILED:
        assert outcome.message.startswith(reason)
    if phase == HookPhase.SUCCEEDED and "completionTime" in job.get("status", {}):
        assert outcome.finished_at is not None


def test_view_job_reads_rendered_job_back() -> None:
    job = render({"template": {"spec": {"containers": [{"name": "a", "image": "x"}]}}})
    view = view_job(job)
    assert view is not None
    assert (view.collaset, view.hook, view.revision, view.outcome.phase) == (
        "web",
        "db-migrate",
        "web-bbb",
        HookPhase.RUNNING,
    )


def test_view_job_ignores_foreign_jobs() -> None:
    assert view_job({"metadata": {"name": "x", "labels": {"app": "y"}}}) is None

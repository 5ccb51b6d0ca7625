"""hooks.planning: progress points, waits, failures, rollover and retention, one decision at a time."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hook_builders import (
    CLS,
    NEW,
    NOW,
    OLD,
    job_of,
    job_spec,
    later,
    make_hook,
    make_inputs,
    run,
    status_of,
    step,
)

from hooks.models import HookPhase, RolloutType, resolve_point
from hooks.planning import EventReason, HookReason, JobDeletion, summarize_hooks
from hooks.rendering import ENV_TYPE, name_job

S, R, F, P, C = (
    HookPhase.SUCCEEDED,
    HookPhase.RUNNING,
    HookPhase.FAILED,
    HookPhase.PENDING,
    HookPhase.CANCELLED,
)


@pytest.mark.parametrize(
    ("point", "replicas", "expected"),
    [
        pytest.param("50%", 4, 2, id="half-of-4"),
        pytest.param("50%", 5, 3, id="half-of-5-rounds-up"),
        pytest.param("33%", 10, 4, id="3.3-rounds-up-to-4"),
        pytest.param("34%", 3, 2, id="1.02-rounds-up-to-2"),
        pytest.param("1%", 3, 1, id="tiny-percent-is-one-pod"),
        pytest.param("0%", 7, 0, id="zero-percent"),
        pytest.param("100%", 7, 7, id="hundred-percent"),
        pytest.param("29%", 100, 29, id="exact-no-float-drift"),
        pytest.param("57%", 100, 57, id="exact-no-float-drift-2"),
        pytest.param(3, 4, 3, id="number"),
        pytest.param(0, 4, 0, id="zero"),
        pytest.param(7, 4, 4, id="number-above-replicas-clamped"),
        pytest.param("50%", 0, 0, id="no-replicas"),
    ],
)
def test_resolve_point(point: int | str, replicas: int, expected: int) -> None:
    assert resolve_point(point, replicas=replicas) == expected


def test_resolve_point_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="percentage"):
        resolve_point("half", replicas=4)


def test_hooks_at_0_50_100_of_4_pods_run_in_order() -> None:
    """The proposal's walk: partitions 0, 2, 4 with the right wait between them."""
    hooks = [make_hook("pre", 0), make_hook("mid", "50%"), make_hook("post", "100%")]
    inputs = make_inputs(hooks)
    # (available new pods, jobs observed) -> (allowed, reason, hooks started)
    script = [
        (0, {}, 0, HookReason.WAITING_FOR_HOOK, ["pre"]),
        (0, {"pre": R}, 0, HookReason.WAITING_FOR_HOOK, []),
        (0, {"pre": S}, 2, HookReason.WAITING_FOR_PODS, []),
        (1, {"pre": S}, 2, HookReason.WAITING_FOR_PODS, []),
        (2, {"pre": S}, 2, HookReason.WAITING_FOR_HOOK, ["mid"]),
        (2, {"pre": S, "mid": R}, 2, HookReason.WAITING_FOR_HOOK, []),
        (2, {"pre": S, "mid": S}, 4, HookReason.WAITING_FOR_PODS, []),
        (4, {"pre": S, "mid": S}, 4, HookReason.WAITING_FOR_HOOK, ["post"]),
        (4, {"pre": S, "mid": S, "post": S}, 4, HookReason.HOOKS_SUCCEEDED, []),
    ]
    decision = None
    for available, jobs, allowed, reason, started in script:
        if decision is not None:
            inputs = step(inputs, decision)
        inputs = replace(
            inputs, updated_available=available, jobs=[job_of(name, phase) for name, phase in jobs.items()]
        )
        decision = run(inputs)
        assert (decision.allowed_updated, decision.reason) == (allowed, reason), (available, jobs)
        assert [job.hook for job in decision.create_jobs] == started
    assert decision is not None
    assert decision.done
    assert [s.phase for s in decision.statuses] == [S, S, S]
    assert decision.summary == "Succeeded 3/3"


@pytest.mark.parametrize(
    ("hooks", "kwargs", "allowed", "reason", "started"),
    [
        pytest.param([], {}, 4, HookReason.NO_HOOKS, [], id="no-hooks"),
        pytest.param(
            [make_hook("pre", 0)],
            {"from_revision": None},
            4,
            HookReason.NO_HOOKS,
            [],
            id="creation-is-no-rollout",
        ),
        pytest.param(
            [make_hook("pre", 0)], {"from_revision": NEW}, 4, HookReason.NO_HOOKS, [], id="rollout-finished"
        ),
        pytest.param(
            [make_hook("pre", 0)],
            {"partition_cap": 0},
            0,
            HookReason.WAITING_FOR_HOOK,
            ["pre"],
            id="point-0-cap-0",
        ),
        pytest.param(
            [make_hook("mid", "50%")],
            {"partition_cap": 1, "updated_available": 1},
            1,
            HookReason.WAITING_FOR_PARTITION,
            [],
            id="partition-caps-below-point",
        ),
        pytest.param(
            [make_hook("mid", "50%")],
            {"partition_cap": 2, "updated_available": 2},
            2,
            HookReason.WAITING_FOR_HOOK,
            ["mid"],
            id="partition-equal-to-point-runs",
        ),
        pytest.param(
            [make_hook("mid", "50%")],
            {"partition_cap": 3, "updated_available": 0},
            2,
            HookReason.WAITING_FOR_PODS,
            [],
            id="point-limits-below-cap",
        ),
        pytest.param(
            [make_hook("a", "50%"), make_hook("b", 2)],
            {"updated_available": 2},
            2,
            HookReason.WAITING_FOR_HOOK,
            ["a", "b"],
            id="two-hooks-one-point-start-together",
        ),
        pytest.param(
            [make_hook("mid", "50%")],
            {"replicas": 5, "partition_cap": 5, "updated_available": 2},
            3,
            HookReason.WAITING_FOR_PODS,
            [],
            id="percent-rounds-to-point-after",
        ),
        pytest.param(
            [make_hook("late", 3)],
            {"replicas": 2, "partition_cap": 2, "updated_available": 2},
            2,
            HookReason.WAITING_FOR_HOOK,
            ["late"],
            id="point-above-replicas-runs-at-end",
        ),
        pytest.param(
            [make_hook("post", "100%")],
            {"replicas": 0, "partition_cap": 0},
            0,
            HookReason.WAITING_FOR_HOOK,
            ["post"],
            id="zero-replicas-still-runs",
        ),
    ],
)
def test_single_decision(
    hooks: list[object], kwargs: dict[str, object], allowed: int, reason: HookReason, started: list[str]
) -> None:
    decision = run(make_inputs(hooks, **kwargs))  # type: ignore[arg-type]
    assert decision.allowed_updated == allowed
    assert decision.reason == reason
    assert sorted(job.hook for job in decision.create_jobs) == started
    assert not decision.stopped


def test_two_hooks_at_one_point_wait_for_both() -> None:
    hooks = [make_hook("a", 2), make_hook("b", "50%"), make_hook("c", 4)]
    statuses = [status_of("a", 2, S), status_of("b", 2, R), status_of("c", 4, P)]
    jobs = [job_of("a", S), job_of("b", R)]
    decision = run(make_inputs(hooks, statuses=statuses, jobs=jobs, updated_available=4))
    assert decision.allowed_updated == 2
    assert decision.reason == HookReason.WAITING_FOR_HOOK
    assert decision.message == f"b (50%) running job {name_job(collaset=CLS, hook='b', revision=NEW)}"
    assert decision.create_jobs == ()


def test_condition_text_names_hook_point_and_job() -> None:
    decision = run(make_inputs([make_hook("db-migrate", "50%")], updated_available=2))
    job = name_job(collaset=CLS, hook="db-migrate", revision=NEW)
    assert decision.condition_text == f"WaitingForHook: db-migrate (50%) running job {job}"
    assert decision.summary == "Running db-migrate"


def test_created_job_is_rendered_for_the_rollout() -> None:
    inputs = make_inputs([make_hook("pre", 0)], rollout_type=RolloutType.ROLLBACK)
    (created,) = run(inputs).create_jobs
    manifest = created.manifest
    assert manifest["metadata"]["name"] == created.name
    assert manifest["metadata"]["ownerReferences"][0]["uid"] == "uid-new"
    env = manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": ENV_TYPE, "value": "ROLLBACK"} in env


@pytest.mark.parametrize(
    ("failure", "stopped", "allowed", "reason", "event"),
    [
        pytest.param("Abort", True, 0, HookReason.HOOK_FAILED, EventReason.HOOK_FAILED, id="abort-stops"),
        pytest.param(
            "Ignore",
            False,
            2,
            HookReason.WAITING_FOR_PODS,
            EventReason.HOOK_FAILURE_IGNORED,
            id="ignore-goes-on",
        ),
    ],
)
def test_failed_hook(
    failure: str, stopped: bool, allowed: int, reason: HookReason, event: EventReason
) -> None:
    hooks = [make_hook("pre", 0, failure=failure), make_hook("mid", "50%")]
    statuses = [status_of("pre", 0, R), status_of("mid", 2, P)]
    jobs = [job_of("pre", F, message="BackoffLimitExceeded: Job has reached the specified backoff limit")]
    decision = run(make_inputs(hooks, statuses=statuses, jobs=jobs))
    assert decision.stopped is stopped
    assert decision.allowed_updated == allowed
    assert decision.reason == reason
    assert [e.reason for e in decision.events] == [event]
    assert decision.events[0].warning
    pre = decision.statuses[0]
    assert pre.phase == F
    assert "BackoffLimitExceeded" in pre.message
    if stopped:
        job = name_job(collaset=CLS, hook="pre", revision=NEW)
        assert decision.message.startswith(f"pre (0) job {job} failed: BackoffLimitExceeded")
        assert decision.message.endswith(f"rollout of {NEW} stopped")
        assert decision.summary == "Failed pre"


def test_abort_stop_is_for_good() -> None:
    hooks = [make_hook("pre", 0)]
    failed = status_of("pre", 0, F)
    decision = run(make_inputs(hooks, statuses=[failed], updated_available=4))
    assert decision.stopped
    assert decision.allowed_updated == 0
    assert decision.create_jobs == ()
    assert decision.events == ()


@pytest.mark.parametrize(
    ("elapsed", "phase", "requeue"),
    [
        pytest.param(100, R, 530.0, id="within-deadline-requeues-at-it"),
        pytest.param(629, R, 1.0, id="just-before-deadline-plus-grace"),
        pytest.param(630, F, None, id="past-deadline-plus-grace-fails"),
    ],
)
def test_running_hook_deadline_backstop(elapsed: int, phase: HookPhase, requeue: float | None) -> None:
    hooks = [make_hook("pre", 0, deadline=600)]
    decision = run(
        make_inputs(hooks, statuses=[status_of("pre", 0, R)], jobs=[job_of("pre", R)], now=later(elapsed))
    )
    assert decision.statuses[0].phase == phase
    assert decision.requeue_after == requeue
    if phase == F:
        assert "DeadlineExceeded" in decision.statuses[0].message
        assert decision.stopped


def test_jobspec_deadline_wins_for_backstop() -> None:
    hooks = [make_hook("pre", 0, deadline=600, spec=job_spec(activeDeadlineSeconds=60))]
    decision = run(
        make_inputs(hooks, statuses=[status_of("pre", 0, R)], jobs=[job_of("pre", R)], now=later(95))
    )
    assert decision.statuses[0].phase == F


def test_rollover_cancels_running_hook_and_starts_over() -> None:
    hooks = [make_hook("pre", 0), make_hook("mid", "50%")]
    older = "web-older"
    statuses = [
        status_of("pre", 0, S, revision=older),
        status_of("mid", 2, R, revision=older),
    ]
    jobs = [job_of("pre", S, revision=older), job_of("mid", R, revision=older)]
    decision = run(make_inputs(hooks, statuses=statuses, jobs=jobs, from_revision=OLD))
    old_job = name_job(collaset=CLS, hook="mid", revision=older)
    assert [(d.name, d.why) for d in decision.delete_jobs] == [(old_job, JobDeletion.CANCELLED)]
    assert [e.reason for e in decision.events] == [EventReason.HOOK_CANCELLED, EventReason.HOOK_STARTED]
    by_revision = {(s.revision, s.name): s.phase for s in decision.statuses}
    assert by_revision == {(NEW, "pre"): R, (NEW, "mid"): P, (older, "mid"): C}
    assert [job.hook for job in decision.create_jobs] == ["pre"]  # the new revision starts from the beginning


def test_rollover_cancels_pending_hooks_without_job() -> None:
    hooks = [make_hook("mid", "50%")]
    statuses = [status_of("mid", 2, P, revision="web-older")]
    decision = run(make_inputs(hooks, statuses=statuses))
    assert decision.delete_jobs == ()
    cancelled = [s for s in decision.statuses if s.revision == "web-older"]
    assert [(s.phase, s.message) for s in cancelled] == [
        (C, f"not started: revision {NEW} superseded web-older")
    ]


def test_cancelled_records_stay_until_the_next_rollover_cancels_something() -> None:
    hooks = [make_hook("pre", 0)]
    first = run(make_inputs(hooks, statuses=[status_of("pre", 0, R, revision="web-a")]))
    again = run(step(make_inputs(hooks), first, jobs=[job_of("pre", R)]))
    assert [(s.revision, s.phase) for s in again.statuses] == [(NEW, R), ("web-a", C)]
    # Another template while NEW's hook runs: NEW's hook is cancelled, web-a's record goes.
    third = run(step(make_inputs(hooks, to_revision="web-c"), again, now=later(5)))
    assert [(s.revision, s.phase) for s in third.statuses] == [("web-c", R), (NEW, C)]


def test_rollback_to_current_revision_cancels_hooks_and_runs_none() -> None:
    hooks = [make_hook("pre", 0)]
    statuses = [status_of("pre", 0, R, revision=NEW)]
    decision = run(
        make_inputs(hooks, statuses=statuses, to_revision=OLD, from_revision=OLD, jobs=[job_of("pre", R)])
    )
    assert decision.reason == HookReason.NO_HOOKS
    assert decision.create_jobs == ()
    assert [d.why for d in decision.delete_jobs] == [JobDeletion.CANCELLED]
    assert [(s.revision, s.phase) for s in decision.statuses] == [(NEW, C)]


def test_running_job_of_removed_hook_is_cancelled() -> None:
    decision = run(make_inputs([make_hook("pre", 0)], jobs=[job_of("gone", R)], statuses=[]))
    assert [(d.hook, d.why) for d in decision.delete_jobs] == [("gone", JobDeletion.CANCELLED)]


@pytest.mark.parametrize(
    ("retain", "phase", "deleted"),
    [
        pytest.param("Always", S, False, id="always-succeeded"),
        pytest.param("Always", F, False, id="always-failed"),
        pytest.param("OnFailure", S, True, id="onfailure-succeeded"),
        pytest.param("OnFailure", F, False, id="onfailure-failed"),
        pytest.param("Never", S, True, id="never-succeeded"),
        pytest.param("Never", F, True, id="never-failed"),
        pytest.param("Never", R, False, id="never-running"),
    ],
)
def test_retain_policy(retain: str, phase: HookPhase, deleted: bool) -> None:
    hooks = [make_hook("pre", 0, retain=retain, failure="Ignore")]
    decision = run(make_inputs(hooks, statuses=[status_of("pre", 0, R)], jobs=[job_of("pre", phase)]))
    assert [(d.hook, d.why) for d in decision.delete_jobs] == (
        [("pre", JobDeletion.RETENTION)] if deleted else []
    )
    assert decision.statuses[0].phase == phase  # recorded in the same plan the deletion comes in


def test_retention_applies_to_finished_jobs_of_old_revisions() -> None:
    hooks = [make_hook("pre", 0, retain="Never")]
    decision = run(make_inputs(hooks, jobs=[job_of("pre", S, revision="web-older")]))
    assert [(d.revision, d.why) for d in decision.delete_jobs] == [("web-older", JobDeletion.RETENTION)]


def test_lost_status_write_adopts_existing_job() -> None:
    decision = run(make_inputs([make_hook("pre", 0)], statuses=[], jobs=[job_of("pre", R)]))
    assert decision.create_jobs == ()
    assert decision.statuses[0].phase == R
    assert decision.events == ()


def test_running_hook_whose_job_vanished_is_created_again() -> None:
    decision = run(make_inputs([make_hook("pre", 0)], statuses=[status_of("pre", 0, R)], jobs=[]))
    assert [job.hook for job in decision.create_jobs] == ["pre"]
    assert decision.statuses[0].phase == R


def test_earlier_point_added_later_runs_before_going_on() -> None:
    hooks = [make_hook("new-pre", 0), make_hook("mid", "50%")]
    statuses = [status_of("mid", 2, S)]
    decision = run(make_inputs(hooks, statuses=statuses, jobs=[job_of("mid", S)], updated_available=2))
    assert decision.allowed_updated == 0
    assert [job.hook for job in decision.create_jobs] == ["new-pre"]


def test_pending_point_follows_replicas() -> None:
    hooks = [make_hook("mid", "50%")]
    decision = run(make_inputs(hooks, statuses=[status_of("mid", 2, P)], replicas=10, partition_cap=10))
    assert decision.statuses[0].point == 5
    assert decision.allowed_updated == 5


@pytest.mark.parametrize(
    ("phases", "stopped", "summary"),
    [
        pytest.param([], False, None, id="none"),
        pytest.param([("a", 0, P), ("b", 2, P)], False, "Waiting a", id="waiting"),
        pytest.param([("a", 0, S), ("b", 2, R)], False, "Running b", id="running"),
        pytest.param([("a", 0, F), ("b", 2, P)], True, "Failed a", id="failed"),
        pytest.param([("a", 0, S), ("b", 2, F)], False, "Succeeded 1/2", id="ignored-failure"),
    ],
)
def test_summary(phases: list[tuple[str, int, HookPhase]], stopped: bool, summary: str | None) -> None:
    statuses = [status_of(name, point, phase) for name, point, phase in phases]
    assert summarize_hooks(statuses, stopped=stopped) == summary


def test_decision_is_pure() -> None:
    inputs = make_inputs([make_hook("pre", 0)], now=NOW)
    assert run(inputs) == run(inputs)


def test_invalid_point_stored_before_admission_fails_the_hook_visibly() -> None:
    decision = run(make_inputs([make_hook("pre", "half")], updated_available=4))
    assert decision.stopped
    assert decision.create_jobs == ()
    assert decision.statuses[0].phase == F
    assert "progress point 'half'" in decision.message
    again = run(step(make_inputs([make_hook("pre", "half")], updated_available=4), decision))
    assert again.events == ()  # the failure is reported once, then stays recorded

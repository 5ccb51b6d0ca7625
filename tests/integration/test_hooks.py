"""Lifecycle hooks against a real control plane: Jobs run by the Job controller, pods on kwok.

Hook Job pods complete at once unless their template asks kwok to run for a while
(``kwok-run-for``) or to fail (``kwok-exit-code``); running hooks let a test look at the
rollout while the hook holds it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from kubernetes_asyncio import client

from lifecycle.labels import SERVICE_AVAILABLE
from rollouts.localcluster.clusters import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION
from tests.integration.conftest import Operator, eventually
from tests.integration.test_collaset_support import Workload, hook, manifest

pytestmark = pytest.mark.integration

NEW = "example.com/app:2"


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def job_finished(job: Any) -> bool:
    return any(
        c.type in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget") and c.status == "True"
        for c in (job.status.conditions or [])
    )


def job_env(job: Any) -> list[dict[str, str]]:
    return [{e.name: e.value for e in c.env or []} for c in job.spec.template.spec.containers]


async def new_pods(web: Workload, image: str = NEW) -> tuple[int, int]:
    """(pods on ``image``, of which service-available)."""
    pods = [p for p in await web.pods() if p.spec.containers[0].image == image]
    return len(pods), sum(SERVICE_AVAILABLE in (p.metadata.labels or {}) for p in pods)


async def hook_phases(web: Workload) -> dict[str, str]:
    status = await web.status()
    updated = status.get("updatedRevision")
    return {h["name"]: h["phase"] for h in status.get("hooks") or [] if h["revision"] == updated}


async def test_hooks_run_in_order_at_their_progress_points(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    slow = {RUN_FOR_ANNOTATION: "2s"}
    hooks = [
        hook("at-end", "100%", annotations=slow),
        hook("pre", 0, annotations=slow),
        hook("mid", "50%", annotations=slow),
    ]
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=4, lifecycleHooks=hooks))
    await web.settled(replicas=4)
    assert not await web.jobs(), "creating a CollaSet is no rollout: no hook runs"
    await web.set_image(NEW)

    seen: dict[str, set[tuple[int, int]]] = {"pre": set(), "mid": set(), "at-end": set()}

    async def observe() -> bool:
        jobs = await web.jobs()
        running = [j.metadata.labels["rollouts.kusionstack.io/hook"] for j in jobs if not job_finished(j)]
        if running:
            counts = await new_pods(web)
            for name in running:
                seen[name].add(counts)
        return len(jobs) == 3 and all(job_finished(j) for j in jobs)

    await eventually(observe, timeout=120, interval=0.1, what="all three hooks finished")
    await web.settled(replicas=4, image=NEW)
    # While a hook runs, exactly its point's number of pods is on the new revision, all available.
    assert seen == {"pre": {(0, 0)}, "mid": {(2, 2)}, "at-end": {(4, 4)}}
    status = await web.status()
    records = {h["name"]: h for h in status["hooks"]}
    assert [records[n]["point"] for n in ("pre", "mid", "at-end")] == [0, 2, 4]
    assert when(records["pre"]["finishTime"]) <= when(records["mid"]["startTime"])
    assert when(records["mid"]["finishTime"]) <= when(records["at-end"]["startTime"])
    assert {h["phase"] for h in status["hooks"]} == {"Succeeded"}
    assert status["hookPhase"] == "Succeeded 3/3"
    assert len(await web.events("HookStarted")) == 3
    assert len(await web.events("HookSucceeded")) == 3


async def test_hook_jobs_get_the_rollout_variables_and_owner(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    user = {"K8S_ROLLOUT_TYPE": "mine"}
    await web.create(
        manifest("web", replicas=2, lifecycleHooks=[hook("check", "100%", env=user, containers=2)])
    )
    await web.settled(replicas=2)
    first = (await web.status())["updatedRevision"]
    await web.set_image(NEW)
    await web.settled(replicas=2, image=NEW)
    second = (await web.status())["updatedRevision"]
    (job,) = await web.jobs()
    expected = {
        "K8S_ROLLOUT_FROM_OBJECT": f"{namespace}/{first}",
        "K8S_ROLLOUT_TO_OBJECT": f"{namespace}/{second}",
        "K8S_ROLLOUT_TYPE": "mine",  # the user's value wins
    }
    assert job_env(job) == [expected, expected]
    owner = job.metadata.owner_references[0]
    assert (owner.kind, owner.name) == ("ControllerRevision", second)
    assert job.metadata.labels["controller-revision-hash"] == second

    # Back to the first template: a rollback, and the hook Job says so.
    await web.patch_spec(
        {
            "template": manifest("web", replicas=2)["spec"]["template"],
            "lifecycleHooks": [hook("check", "100%", containers=1)],
        }
    )
    await web.settled(replicas=2, image="example.com/app:1")
    jobs = {j.metadata.labels["controller-revision-hash"]: j for j in await web.jobs()}
    assert job_env(jobs[first]) == [
        {
            "K8S_ROLLOUT_FROM_OBJECT": f"{namespace}/{second}",
            "K8S_ROLLOUT_TO_OBJECT": f"{namespace}/{first}",
            "K8S_ROLLOUT_TYPE": "ROLLBACK",
        }
    ]


async def test_abort_hook_failure_stops_the_rollout(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    failing = {EXIT_CODE_ANNOTATION: "1"}
    web = Workload(api, namespace, "web")
    hooks = [hook("smoke", "50%", annotations=failing), hook("never", "100%")]
    await web.create(manifest("web", replicas=4, lifecycleHooks=hooks))
    await web.settled(replicas=4)
    await web.set_image(NEW)

    async def failed() -> dict[str, Any] | None:
        condition = await web.condition("Failed")
        return condition if condition and condition.get("status") == "True" else None

    condition = await eventually(failed, timeout=120, what="condition Failed")
    assert condition["reason"] == "HookFailed"
    assert "smoke" in condition["message"]
    update = await web.condition("Update") or {}
    assert update["reason"] == "HookFailed"
    assert await hook_phases(web) == {"smoke": "Failed", "never": "Pending"}
    assert (await web.status())["hookPhase"] == "Failed smoke"
    assert await web.events("HookFailed")
    # Stopped at the hook's point: the 2 pods it needed are updated, no more.
    assert await new_pods(web) == (2, 2)
    assert (await web.status())["currentRevision"] != (await web.status())["updatedRevision"]
    assert len(await web.jobs()) == 1


async def test_ignore_hook_failure_goes_on(api: client.ApiClient, namespace: str, operator: Operator) -> None:
    failing = {EXIT_CODE_ANNOTATION: "1"}
    web = Workload(api, namespace, "web")
    hooks = [hook("flaky", "50%", failure="Ignore", annotations=failing), hook("done", "100%")]
    await web.create(manifest("web", replicas=4, lifecycleHooks=hooks))
    await web.settled(replicas=4)
    await web.set_image(NEW)
    await web.settled(replicas=4, image=NEW, timeout=120)
    assert await hook_phases(web) == {"flaky": "Failed", "done": "Succeeded"}
    assert await web.events("HookFailureIgnored")
    assert (await web.condition("Failed") or {}).get("status") == "False"


async def test_retain_policies(api: client.ApiClient, namespace: str, operator: Operator) -> None:
    failing = {EXIT_CODE_ANNOTATION: "1"}
    web = Workload(api, namespace, "web")
    hooks = [
        hook("always", "100%", retain="Always"),
        hook("on-failure-ok", "100%", retain="OnFailure"),
        hook("on-failure-bad", "100%", retain="OnFailure", failure="Ignore", annotations=failing),
        hook("never", "100%", retain="Never"),
    ]
    await web.create(manifest("web", replicas=2, lifecycleHooks=hooks))
    await web.settled(replicas=2)
    await web.set_image(NEW)
    await web.settled(replicas=2, image=NEW, timeout=120)

    async def kept() -> set[str] | None:
        names = {j.metadata.labels["rollouts.kusionstack.io/hook"] for j in await web.jobs()}
        return names if names == {"always", "on-failure-bad"} else None

    await eventually(kept, what="only the Always and the failed OnFailure Jobs kept")
    assert await hook_phases(web) == {
        "always": "Succeeded",
        "on-failure-ok": "Succeeded",
        "on-failure-bad": "Failed",
        "never": "Succeeded",
    }


async def test_hooks_at_one_point_run_in_parallel(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    slow = {RUN_FOR_ANNOTATION: "3s"}
    web = Workload(api, namespace, "web")
    hooks = [hook("a", "50%", annotations=slow), hook("b", "50%", annotations=slow)]
    await web.create(manifest("web", replicas=2, lifecycleHooks=hooks))
    await web.settled(replicas=2)
    await web.set_image(NEW)

    async def both_running() -> bool:
        jobs = await web.jobs()
        return len(jobs) == 2 and not any(job_finished(j) for j in jobs)

    await eventually(both_running, timeout=90, interval=0.1, what="both hooks of 50% running at once")
    status = await web.status()
    assert status["hookPhase"] == "Running a,b"
    update = await web.condition("Update") or {}
    assert update["reason"] == "WaitingForHook"
    assert "a (50%) running job" in update["message"] and "b (50%) running job" in update["message"]
    await web.settled(replicas=2, image=NEW, timeout=120)


async def test_rollover_cancels_a_running_hook(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    stuck = [hook("slow", "50%", annotations={RUN_FOR_ANNOTATION: "120s"})]
    await web.create(manifest("web", replicas=2, lifecycleHooks=stuck))
    await web.settled(replicas=2)
    await web.set_image(NEW)

    async def running() -> Any:
        jobs = await web.jobs()
        return jobs[0] if len(jobs) == 1 and not job_finished(jobs[0]) else None

    job = await eventually(running, timeout=90, what="hook slow running")
    old_revision = job.metadata.labels["controller-revision-hash"]
    await web.patch_spec(
        {
            "template": manifest("web", replicas=2, image="example.com/app:3")["spec"]["template"],
            "lifecycleHooks": [hook("slow", "50%")],
        }
    )
    await web.settled(replicas=2, image="example.com/app:3", timeout=120)
    status = await web.status()
    cancelled = [h for h in status["hooks"] if h["revision"] == old_revision]
    assert [(h["name"], h["phase"]) for h in cancelled] == [("slow", "Cancelled")]
    assert await web.events("HookCancelled")

    async def old_job_gone() -> bool:
        names = {j.metadata.name for j in await web.jobs() if j.metadata.deletion_timestamp is None}
        return job.metadata.name not in names

    await eventually(old_job_gone, what="the cancelled Job deleted")


async def test_restart_mid_hook_runs_no_hook_twice(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    hooks = [hook("mid", "50%", annotations={RUN_FOR_ANNOTATION: "4s"}), hook("end", "100%")]
    await web.create(manifest("web", replicas=4, lifecycleHooks=hooks))
    await web.settled(replicas=4)
    await web.set_image(NEW)

    async def mid_running() -> Any:
        jobs = await web.jobs()
        return jobs[0] if len(jobs) == 1 and not job_finished(jobs[0]) else None

    job = await eventually(mid_running, timeout=90, what="hook mid running")
    operator.restart()
    await web.settled(replicas=4, image=NEW, timeout=120)
    jobs = {j.metadata.labels["rollouts.kusionstack.io/hook"]: j for j in await web.jobs()}
    assert set(jobs) == {"mid", "end"}
    assert jobs["mid"].metadata.uid == job.metadata.uid
    started = [e.message for e in await web.events("HookStarted")]
    assert len(started) == 2, started
    assert await hook_phases(web) == {"mid": "Succeeded", "end": "Succeeded"}


async def test_restart_mid_update_leaves_no_pod_behind(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=5, lifecycleHooks=[hook("end", "100%")]))
    await web.settled(replicas=5)
    await web.set_image(NEW)

    async def some_updated() -> bool:
        updated, _ = await new_pods(web)
        return 0 < updated < 5

    await eventually(some_updated, timeout=90, interval=0.05, what="update under way")
    operator.restart()
    pods = await web.settled(replicas=5, image=NEW, timeout=120)
    for pod in pods:
        assert not [k for k in pod.metadata.labels if k.startswith("operating.podopslifecycle")], (
            pod.metadata.name
        )
    assert len(await web.events("HookStarted")) == 1

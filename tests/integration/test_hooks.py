"""Lifecycle hooks against a real control plane: Jobs run by the Job controller, pods on kwok.

Hook Job pods complete at once unless their template asks kwok to run for a while
(``kwok-run-for``) or to fail (``kwok-exit-code``); running hooks let a test look at the
rollout while the hook holds it.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from lifecycle.labels import OPERATING, SERVICE_AVAILABLE
from rollouts.api.collasets import GROUP, VERSION
from rollouts.localcluster.clusters import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION
from tests.cluster_support import Operator, eventually
from tests.integration.ptr_support import kubectl_binary
from tests.integration.test_collaset_support import PLURAL, Workload, hook, manifest

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

    async def some_operating() -> bool:
        # Pods in PodOpsLifecycle, not a count of new images: without maxUnavailable all five
        # are updated in place at once, and 0 < updated < 5 may never be observable.
        return any(key.startswith(OPERATING) for p in await web.pods() for key in p.metadata.labels or {})

    await eventually(some_operating, timeout=90, interval=0.05, what="pods in their update operation")
    operator.restart()
    pods = await web.settled(replicas=5, image=NEW, timeout=120)
    for pod in pods:
        assert not [k for k in pod.metadata.labels if k.startswith(OPERATING)], pod.metadata.name
    assert len(await web.events("HookStarted")) == 1


# Restart safety (issue item 7): the operator stops at each moment of a hook's life.

#: Every controller but the CollaSet one: admission (and the pods' lifecycle) keep working,
#: so a CollaSet can be changed while nothing acts on it. A stopped operator cannot stand in
#: here: its webhook configurations (failurePolicy Fail) would refuse the change.
WITHOUT_COLLASETS = frozenset({"lifecycle", "transitionrules"})


async def job_of(web: Workload, hook_name: str) -> Any:
    jobs = [j for j in await web.jobs() if j.metadata.labels["rollouts.kusionstack.io/hook"] == hook_name]
    assert len(jobs) <= 1, [j.metadata.name for j in jobs]
    return jobs[0] if jobs else None


async def hook_record(web: Workload, hook_name: str) -> dict[str, Any]:
    status = await web.status()
    updated = status.get("updatedRevision")
    (record,) = [h for h in status.get("hooks") or [] if h["name"] == hook_name and h["revision"] == updated]
    return dict(record)


async def test_restart_before_the_hook_job_exists_creates_it_once(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2, lifecycleHooks=[hook("pre", 0)]))
    await web.settled(replicas=2)
    operator.restart(controllers=WITHOUT_COLLASETS)
    try:
        # The point-0 hook is due from this write on, and no controller has seen it yet.
        await web.set_image(NEW)
        assert not await web.jobs()
        assert not (await web.status()).get("hooks")
    finally:
        operator.restart(controllers=None)

    uids: set[str] = set()

    async def rolled_out() -> bool:
        uids.update(j.metadata.uid for j in await web.jobs())
        obj = await web.get()
        status = obj.get("status") or {}
        return (
            status.get("observedGeneration") == obj["metadata"]["generation"]
            and status.get("updatedAvailableReplicas") == 2
            and status.get("currentRevision") == status.get("updatedRevision")
        )

    await eventually(rolled_out, timeout=120, interval=0.1, what="rollout done after the restart")
    await web.settled(replicas=2, image=NEW)
    job = await job_of(web, "pre")
    assert uids == {job.metadata.uid}, "the hook Job was created more than once"
    assert (job.status.succeeded, job.status.failed or 0) == (1, 0)
    assert await hook_phases(web) == {"pre": "Succeeded"}
    assert len(await web.events("HookStarted")) == 1
    assert len(await web.events("HookSucceeded")) == 1


async def test_restart_between_the_status_write_and_the_job_create(
    api: client.ApiClient, namespace: str, operator: Operator
) -> None:
    """The operator dies after recording the hook Running but before its Job exists.

    ``collasets_applying.Applier.apply`` writes the status (hook Running, its Job name and
    start time) first and creates the Job after it, so a crash between the two leaves a
    Running record without a Job. A ResourceQuota of zero Jobs makes the create fail (403)
    while the status write succeeds, which holds the operator exactly there; the test then
    stops it, lifts the quota and starts a new one. Pinned: the new operator creates the
    recorded Job (same name) once, starts no second hook (one HookStarted Event, posted by
    the first operator), and the rollout completes.
    """
    core = client.CoreV1Api(api)
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2, lifecycleHooks=[hook("pre", 0)]))
    await web.settled(replicas=2)
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="no-jobs"),
        spec=client.V1ResourceQuotaSpec(hard={"count/jobs.batch": "0"}),
    )
    await core.create_namespaced_resource_quota(namespace, quota)

    async def quota_enforced() -> bool:
        found = await core.read_namespaced_resource_quota("no-jobs", namespace)
        return "count/jobs.batch" in ((found.status and found.status.hard) or {})

    await eventually(quota_enforced, what="the quota counted by kube-controller-manager")
    await web.set_image(NEW)

    async def create_refused() -> list[Any]:
        return [e for e in await web.events("ReconcileError") if "create hook Job" in (e.message or "")]

    refused = await eventually(create_refused, timeout=60, what="the hook Job create refused by the quota")
    assert "quota" in refused[0].message, refused[0].message
    operator.stop()
    try:
        record = await hook_record(web, "pre")
        assert record["phase"] == "Running" and record["jobName"], record
        assert not await web.jobs()
        assert await new_pods(web) == (0, 0), "no pod is touched before the point-0 hook ran"
        await core.delete_namespaced_resource_quota("no-jobs", namespace)
    finally:
        operator.start()

    await web.settled(replicas=2, image=NEW, timeout=120)
    job = await job_of(web, "pre")
    assert job.metadata.name == record["jobName"]
    assert (job.status.succeeded, job.status.failed or 0) == (1, 0)
    assert await hook_phases(web) == {"pre": "Succeeded"}
    assert len(await web.events("HookStarted")) == 1
    assert len(await web.events("HookSucceeded")) == 1


@pytest.mark.parametrize(
    "retain",
    [
        pytest.param("Always", id="job-kept"),
        # The new operator records the outcome, then deletes the Job (retention) once;
        # the hook does not run again although its Job is gone.
        pytest.param("Never", id="job-deleted-after"),
    ],
)
async def test_restart_after_the_hook_job_finished_records_it_once(
    api: client.ApiClient, namespace: str, operator: Operator, retain: str
) -> None:
    web = Workload(api, namespace, "web")
    hooks = [hook("mid", "50%", retain=retain, annotations={RUN_FOR_ANNOTATION: "8s"}), hook("end", "100%")]
    await web.create(manifest("web", replicas=2, lifecycleHooks=hooks))
    await web.settled(replicas=2)
    await web.set_image(NEW)

    async def mid_running() -> Any:
        job = await job_of(web, "mid")
        if job is None or job_finished(job):
            return None
        return job if (await hook_phases(web)).get("mid") == "Running" else None

    job = await eventually(mid_running, timeout=90, what="hook mid running")
    operator.stop()
    try:
        assert (await hook_record(web, "mid"))["phase"] == "Running", "stopped too late: the hook finished"

        async def complete() -> Any:
            found = await job_of(web, "mid")
            done = any(c.type == "Complete" and c.status == "True" for c in found.status.conditions or [])
            return found if done else None

        finished = await eventually(
            complete, timeout=60, what="the hook Job complete while the operator is down"
        )
        assert (await hook_record(web, "mid"))["phase"] == "Running"
    finally:
        operator.start()

    mid_uids: set[str] = set()

    async def rolled_out() -> bool:
        found = await job_of(web, "mid")
        if found is not None:
            mid_uids.add(found.metadata.uid)
        phases = await hook_phases(web)
        return phases == {"mid": "Succeeded", "end": "Succeeded"} and (retain == "Always") == (
            found is not None
        )

    await eventually(rolled_out, timeout=120, interval=0.1, what=f"both hooks recorded, mid's Job {retain}")
    await web.settled(replicas=2, image=NEW, timeout=120)
    assert mid_uids <= {job.metadata.uid}, "the finished hook Job was created again"
    if retain == "Always":
        after = await job_of(web, "mid")
        assert after.metadata.uid == job.metadata.uid
        assert (after.status.succeeded, after.status.failed or 0) == (1, 0)
    else:
        assert await job_of(web, "mid") is None
        deleted = [e.message for e in await web.events("HookJobDeleted")]
        assert len(deleted) == 1 and deleted[0].startswith("hook mid:"), deleted
    record = await hook_record(web, "mid")
    # The outcome comes from the Job, not from when the new operator noticed it.
    assert when(record["finishTime"]) == finished.status.completion_time
    succeeded = [e.message for e in await web.events("HookSucceeded")]
    assert sorted(m.split(":")[0] for m in succeeded) == ["hook end", "hook mid"], succeeded
    assert len(await web.events("HookStarted")) == 2


# Admission through the API server: the CRD schema answers first for enums and required
# fields, our validating webhook for what a schema cannot say; both name the field.


def _with_hooks(*hooks: dict[str, Any], replicas: int = 2) -> dict[str, Any]:
    return manifest("web", replicas=replicas, lifecycleHooks=list(hooks))


def _without(item: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != key}


def _trigger(item: dict[str, Any], kind: str) -> dict[str, Any]:
    return {**item, "trigger": {**item["trigger"], "type": kind}}


@pytest.mark.parametrize(
    ("body", "field", "problem"),
    [
        pytest.param(
            _with_hooks(hook("smoke", "50%"), hook("smoke", "100%")),
            "spec.lifecycleHooks[1].name",
            "duplicate hook name 'smoke' (also spec.lifecycleHooks[0])",
            id="duplicate-names",
        ),
        pytest.param(
            _with_hooks(hook("smoke", "150%")),
            "spec.lifecycleHooks[0].trigger.progressAvailableParams.progressPoint",
            "150% is above 100%",
            id="percent-above-100",
        ),
        pytest.param(
            _with_hooks(hook("ok", 1), hook("smoke", 3)),
            "spec.lifecycleHooks[1].trigger.progressAvailableParams.progressPoint",
            "3 is above spec.replicas (2)",
            id="number-above-replicas",
        ),
        pytest.param(
            _with_hooks(_without(hook("smoke", "50%"), "jobSpec")),
            "spec.lifecycleHooks[0].jobSpec",
            "Required value",
            id="missing-job-spec",
        ),
        pytest.param(
            _with_hooks(hook("smoke", "50%", failure="Retry")),
            "spec.lifecycleHooks[0].failurePolicy",
            'Unsupported value: "Retry"',
            id="unknown-failure-policy",
        ),
        pytest.param(
            _with_hooks(hook("smoke", "50%", retain="Sometimes")),
            "spec.lifecycleHooks[0].retainPolicy",
            'Unsupported value: "Sometimes"',
            id="unknown-retain-policy",
        ),
        pytest.param(
            _with_hooks(_trigger(hook("smoke", "50%"), "Timer")),
            "spec.lifecycleHooks[0].trigger.type",
            'Unsupported value: "Timer"',
            id="unknown-trigger-type",
        ),
    ],
)
async def test_admission_rejects_bad_hooks_naming_the_field(
    api: client.ApiClient,
    namespace: str,
    operator: Operator,
    body: dict[str, Any],
    field: str,
    problem: str,
) -> None:
    web = Workload(api, namespace, "web")

    async def refused(write: Callable[[], Awaitable[Any]]) -> tuple[int, str] | None:
        try:
            await write()
        except ApiException as e:
            if e.status == 500 and "webhook" in str(e.body):
                return None  # the operator's webhook is not reachable yet
            return e.status, str(json.loads(e.body or b"{}").get("message"))
        raise AssertionError("the API server accepted an invalid CollaSet")

    def create() -> Awaitable[Any]:
        return web.custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, copy.deepcopy(body)
        )

    status, message = await eventually(lambda: refused(create), what="admission to answer the create")
    assert status == 422, message
    assert f"{field}: {problem}" in message, message

    # The same hooks on an update of a valid CollaSet are refused too, and nothing is stored.
    await web.create(_with_hooks(hook("fine", "50%"), replicas=body["spec"]["replicas"]))
    status, message = await eventually(
        lambda: refused(lambda: web.patch_spec({"lifecycleHooks": body["spec"]["lifecycleHooks"]})),
        what="admission to answer the update",
    )
    assert status == 422, message
    assert f"{field}: {problem}" in message, message
    assert [h["name"] for h in (await web.get())["spec"]["lifecycleHooks"]] == ["fine"]


# What a user sees with kubectl while a hook holds the rollout.


async def kubectl(kubeconfig: Path, namespace: str, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        kubectl_binary(), "--kubeconfig", str(kubeconfig), "-n", namespace, *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await process.communicate()
    assert process.returncode == 0, out.decode()
    return out.decode()


async def test_kubectl_shows_the_hook_holding_the_rollout(
    api: client.ApiClient, namespace: str, operator: Operator, kubeconfig: Path
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(
        manifest(
            "web", replicas=2, lifecycleHooks=[hook("smoke", "50%", annotations={RUN_FOR_ANNOTATION: "300s"})]
        )
    )
    await web.settled(replicas=2)
    await web.set_image(NEW)

    async def waiting() -> dict[str, Any] | None:
        update = await web.condition("Update")
        return update if update and update.get("reason") == "WaitingForHook" else None

    await eventually(waiting, timeout=90, what="the rollout waiting for hook smoke")
    job_name = (await hook_record(web, "smoke"))["jobName"]

    table = (await kubectl(kubeconfig, namespace, "get", "cls", "web")).splitlines()
    header, row = table[0].split(), table[1]
    assert "HOOK" in header, table
    assert "Running smoke" in row, table

    described = await kubectl(kubeconfig, namespace, "describe", "cls", "web")
    assert "WaitingForHook" in described, described
    assert f"smoke (50%) running job {job_name}" in described, described

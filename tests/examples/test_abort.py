"""examples/abort-on-failing-smoke-test/: a failing smoke test (failurePolicy Abort) stops the
rollout of release 1.1 at 2 of 4 pods; release 1.2 is a new revision, and its rollout completes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from lifecycle.labels import ID_PREFIXES
from rollouts.localcluster.clusters import EXIT_CODE_ANNOTATION
from tests.cluster_support import Operator, eventually
from tests.examples.support import Example, container_env, job_for
from tests.integration.test_collaset_support import STEP_TIMEOUT, Workload

pytestmark = [pytest.mark.integration, pytest.mark.examples]

DIRECTORY = "abort-on-failing-smoke-test"
IMAGE = "registry.example.com/shop:{}"


def hooks_of(status: dict[str, Any], revision: str) -> dict[str, str]:
    return {h["name"]: h["phase"] for h in status.get("hooks") or [] if h["revision"] == revision}


async def test_failing_smoke_test_stops_the_rollout_and_a_fixed_release_resumes(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    example = Example(kubeconfig, namespace)
    shop = Workload(api, namespace, "shop")
    await example.apply(DIRECTORY)
    await shop.settled(replicas=4, image=IMAGE.format("1.0"))
    good = (await shop.status())["updatedRevision"]

    await example.apply(f"{DIRECTORY}/bad-release")

    async def failed() -> dict[str, Any] | None:
        condition = await shop.condition("Failed")
        return condition if condition and condition.get("status") == "True" else None

    condition = await eventually(failed, timeout=STEP_TIMEOUT, what="condition Failed")
    status = await shop.status()
    bad = status["updatedRevision"]
    assert bad != good and status["currentRevision"] == good
    smoke = job_for(await shop.jobs(), revision=bad, hook="smoke-test")
    assert smoke.spec.template.metadata.annotations[EXIT_CODE_ANNOTATION] == "1"
    assert condition["reason"] == "HookFailed"
    assert "smoke-test" in condition["message"] and smoke.metadata.name in condition["message"]
    assert f"rollout of {bad} stopped" in condition["message"]
    assert ((await shop.condition("Update")) or {}).get("reason") == "HookFailed"
    assert hooks_of(status, bad) == {"smoke-test": "Failed", "announce": "Pending"}
    assert status["hookPhase"] == "Failed smoke-test"
    assert [e.reason for e in await shop.events("HookFailed")] == ["HookFailed"]
    assert [j.metadata.name for j in await shop.jobs()] == [smoke.metadata.name], "announce never ran"
    # Stopped at the hook's point (50% of 4): 2 pods on 1.1, and no other pod is being updated.
    pods = await shop.pods()
    by_image = sorted(p.spec.containers[0].image for p in pods)
    assert by_image == [IMAGE.format("1.0")] * 2 + [IMAGE.format("1.1")] * 2
    for pod in pods:
        if pod.spec.containers[0].image == IMAGE.format("1.0"):
            lifecycle = [k for k in pod.metadata.labels if k.startswith(ID_PREFIXES)]
            assert not lifecycle, (pod.metadata.name, lifecycle)
    assert (status["updatedReplicas"], status["updatedAvailableReplicas"]) == (2, 2)

    await example.apply(f"{DIRECTORY}/fixed-release")
    await shop.settled(replicas=4, image=IMAGE.format("1.2"))
    status = await shop.status()
    fixed = status["updatedRevision"]
    assert fixed not in (good, bad) and status["currentRevision"] == fixed
    assert hooks_of(status, fixed) == {"smoke-test": "Succeeded", "announce": "Succeeded"}
    # The new rollout starts from the last completed revision (1.0), not from the stopped one.
    env = container_env(job_for(await shop.jobs(), revision=fixed, hook="smoke-test"))
    assert (env["K8S_ROLLOUT_FROM_OBJECT"], env["K8S_ROLLOUT_TYPE"]) == (f"{namespace}/{good}", "ROLLOUT")
    assert ((await shop.condition("Failed")) or {}).get("status") == "False"
    assert ((await shop.condition("Update")) or {}).get("reason") == "Updated"

"""examples/rollback/: v1, then v2, then v1's manifest again: a rollback to v1's ControllerRevision,
whose hook Job is told K8S_ROLLOUT_TYPE=ROLLBACK."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client

from tests.cluster_support import Operator
from tests.examples.support import Example, container_env, controller_revisions, job_for
from tests.integration.test_collaset_support import Workload, uids

pytestmark = [pytest.mark.integration, pytest.mark.examples]

V1, V2 = "nginx:1.25", "nginx:1.26"


async def test_applying_v1_again_reuses_its_revision_and_hooks_see_a_rollback(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    example = Example(kubeconfig, namespace)
    web = Workload(api, namespace, "web")

    await example.apply("rollback")
    first_pods = await web.settled(replicas=3, image=V1)
    v1 = (await web.status())["updatedRevision"]
    assert await controller_revisions(api, namespace, "web") == {v1: 1}

    await example.apply("rollback/v2")
    await web.settled(replicas=3, image=V2)
    v2 = (await web.status())["updatedRevision"]
    assert await controller_revisions(api, namespace, "web") == {v1: 1, v2: 2}
    rollout = job_for(await web.jobs(), revision=v2, hook="db-migrate")
    assert container_env(rollout) == {
        "K8S_ROLLOUT_FROM_OBJECT": f"{namespace}/{v1}",
        "K8S_ROLLOUT_TO_OBJECT": f"{namespace}/{v2}",
        "K8S_ROLLOUT_TYPE": "ROLLOUT",
    }

    await example.apply("rollback")
    pods = await web.settled(replicas=3, image=V1)
    status = await web.status()
    # The earlier revision is brought back under its own name, its number bumped past v2's.
    assert (status["updatedRevision"], status["currentRevision"]) == (v1, v1)
    assert await controller_revisions(api, namespace, "web") == {v1: 3, v2: 2}
    rollback = job_for(await web.jobs(), revision=v1, hook="db-migrate")
    assert container_env(rollback) == {
        "K8S_ROLLOUT_FROM_OBJECT": f"{namespace}/{v2}",
        "K8S_ROLLOUT_TO_OBJECT": f"{namespace}/{v1}",
        "K8S_ROLLOUT_TYPE": "ROLLBACK",
    }
    assert rollback.status.succeeded == 1
    assert [(h["name"], h["revision"], h["phase"]) for h in status["hooks"]] == [
        ("db-migrate", v1, "Succeeded")
    ]
    # Only images changed, so both updates were in place: the pods are the ones v1 created.
    assert uids(pods) == uids(first_pods)

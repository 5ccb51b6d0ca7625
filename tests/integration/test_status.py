"""``rollouts status`` against a real control plane: the CLI in a subprocess, the operator in-process.

Each test drives a CollaSet into one ending (complete, failed by an Abort hook, progress
deadline exceeded, our own --timeout) and checks the exit code and what was printed.
The subprocess writes to a pipe, so it prints plain lines, one per change.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rollouts.localcluster.clusters import EXIT_CODE_ANNOTATION, RUN_FOR_ANNOTATION
from rollouts.status import EXIT_COMPLETE, EXIT_DEADLINE, EXIT_FAILED, EXIT_TIMEOUT
from tests.cluster_support import Operator, eventually
from tests.integration.test_collaset_support import Workload, hook, manifest

pytestmark = pytest.mark.integration

NEW = "example.com/app:2"
#: Longest a rollout of these small CollaSets may take before the CLI gives up (exit 3 = test failure).
ROLLOUT_TIMEOUT = "150s"


@dataclass(frozen=True)
class Run:
    code: int
    out: str
    err: str


async def rollouts_status(kubeconfig: Path, namespace: str, *args: str) -> Run:
    """``rollouts status`` as a user runs it, in a subprocess; stdout is a pipe (plain output)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rollouts.cli",
        "status",
        *args,
        "-n",
        namespace,
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return Run(process.returncode, out.decode(), err.decode())


async def create_label_rule(api: client.ApiClient, namespace: str, *, app: str) -> None:
    """A PodTransitionRule whose label check no pod passes: every update waits in PreCheck."""
    body: dict[str, Any] = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "PodTransitionRule",
        "metadata": {"name": "blocker"},
        "spec": {
            "selector": {"matchLabels": {"app": app}},
            "rules": [{"name": "needs-label", "labelCheck": {"requires": {"matchLabels": {"never": "set"}}}}],
        },
    }
    custom = client.CustomObjectsApi(api)

    async def create() -> bool:
        try:
            await custom.create_namespaced_custom_object(
                "apps.kusionstack.io", "v1alpha1", namespace, "podtransitionrules", body
            )
        except ApiException as e:
            if e.status == 500 and "webhook" in str(e.body):
                return False  # the admission webhook is not reachable yet
            raise
        return True

    await eventually(create, what="PodTransitionRule created")


async def test_exit_0_when_the_rollout_completes(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    # The hook runs first and long enough for the CLI (a new Python process) to see it running.
    slow = {RUN_FOR_ANNOTATION: "10s"}
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=3, lifecycleHooks=[hook("migrate", 0, annotations=slow)]))
    await web.settled(replicas=3)
    await web.set_image(NEW)

    run = await rollouts_status(kubeconfig, namespace, "cls/web", "--timeout", ROLLOUT_TIMEOUT)

    assert run.code == EXIT_COMPLETE, run
    lines = run.out.splitlines()
    assert lines[-1].startswith("rollout complete: 3 of 3 pods updated and available"), run.out
    assert any(
        line.startswith("hook migrate (at 0 available pods): Running, job web-migrate-") for line in lines
    )
    assert any(line.startswith("hook migrate (at 0 available pods): Succeeded") for line in lines)
    # Pods were seen going through their update, and the wait reason was shown.
    assert any(", update Preparing, " in line or ", update Operating, " in line for line in lines), run.out
    assert any(line.startswith("cls/web: waiting: ") for line in lines), run.out
    assert "\x1b" not in run.out  # no terminal: no ANSI sequences
    status = await web.status()
    assert status["currentRevision"] == status["updatedRevision"]

    # Once complete, --watch=false prints the state once and exits 0 too.
    again = await rollouts_status(kubeconfig, namespace, "cls/web", "--watch=false")
    assert again.code == EXIT_COMPLETE, again
    assert again.out.splitlines()[-1].startswith("rollout complete: 3 of 3"), again.out


async def test_exit_1_when_an_abort_hook_fails(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    failing = {EXIT_CODE_ANNOTATION: "1"}
    web = Workload(api, namespace, "web")
    hooks = [hook("smoke", "50%", annotations=failing), hook("never", "100%")]
    await web.create(manifest("web", replicas=4, lifecycleHooks=hooks))
    await web.settled(replicas=4)
    await web.set_image(NEW)

    run = await rollouts_status(kubeconfig, namespace, "cls/web", "--timeout", ROLLOUT_TIMEOUT)

    assert run.code == EXIT_FAILED, run
    assert "rollouts: rollout failed: " in run.err, run
    assert "smoke" in run.err
    assert any(line.startswith("hook smoke (at 2 available pods): Failed") for line in run.out.splitlines())
    condition = await web.condition("Failed") or {}
    assert (condition.get("status"), condition.get("reason")) == ("True", "HookFailed")

    # A finished failure is reported at once without --watch too (kubectl reports errors with -w=false).
    again = await rollouts_status(kubeconfig, namespace, "cls/web", "-w=false")
    assert again.code == EXIT_FAILED, again


async def test_exit_2_when_the_progress_deadline_is_exceeded(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2, progressDeadlineSeconds=3))
    await web.settled(replicas=2)
    await create_label_rule(api, namespace, app="web")
    await web.set_image(NEW)

    run = await rollouts_status(kubeconfig, namespace, "cls/web", "--timeout", ROLLOUT_TIMEOUT)

    assert run.code == EXIT_DEADLINE, run
    assert "rollouts: progress deadline exceeded: " in run.err, run
    condition = await web.condition("Progressing") or {}
    assert (condition.get("status"), condition.get("reason")) == ("False", "ProgressDeadlineExceeded")


async def test_exit_3_on_timeout_and_once_without_watch(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    web = Workload(api, namespace, "web")
    await web.create(manifest("web", replicas=2))
    await web.settled(replicas=2)
    await create_label_rule(api, namespace, app="web")
    await web.set_image(NEW)

    run = await rollouts_status(kubeconfig, namespace, "cls/web", "--timeout", "3s")

    assert run.code == EXIT_TIMEOUT, run
    assert "rollouts: timed out waiting for the rollout of cls/web after 3s" in run.err
    assert "blocker" in run.out  # the wait reason names the rule that holds the pods

    # Like kubectl rollout status -w=false: the state once, exit 0 while in progress.
    once = await rollouts_status(kubeconfig, namespace, "cls/web", "-w=false")
    assert once.code == EXIT_COMPLETE, once
    assert once.out.splitlines()[-1].startswith("waiting for the rollout to finish: 0 of 2"), once.out


async def test_exit_1_when_the_collaset_does_not_exist(kubeconfig: Path, namespace: str) -> None:
    run = await rollouts_status(kubeconfig, namespace, "cls/nothere")
    assert run.code == 1, run
    assert run.err.strip() == f'rollouts: collaset "nothere" not found in namespace "{namespace}"'

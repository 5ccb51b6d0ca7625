"""examples/quickstart/: applied with the real kubectl, rolled out while the traffic controller runs.

Checks what the quickstart README promises: 6 pods, the PodTransitionRule's budget keeps at
most one pod out of service at a time and its label check passes them, the hooks run at 0,
3 and 6 available pods with the K8S_ROLLOUT_* variables their command prints, and
``rollouts status`` (in-process here) follows the rollout to "rollout complete".
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from lifecycle.labels import SERVICE_AVAILABLE
from rollouts.localcluster.building import ensure_binaries
from rollouts.status import EXIT_COMPLETE, PlainDisplay, follow_rollout
from tests.cluster_support import Operator, eventually
from tests.examples.traffic_support import EXAMPLES, backends, following, running_traffic_controller
from tests.integration.test_collaset_support import Workload

pytestmark = [pytest.mark.integration, pytest.mark.examples]

QUICKSTART = EXAMPLES / "quickstart"
TRAFFIC_CONTROLLER = EXAMPLES / "traffic-controller" / "traffic.py"
NEW = "nginx:1.27"
HOOK_COMMAND = ["sh", "-c", "env | grep K8S_ROLLOUT_"]


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real kubectl binary against the test cluster."""
    command = [str(ensure_binaries(say=lambda _: None).kubectl), "--kubeconfig", str(kubeconfig), *args]
    return subprocess.run(command, capture_output=True, text=True, check=False)


async def apply_quickstart(kubeconfig: Path, namespace: str) -> None:
    """``kubectl apply -f examples/quickstart/``, retried while the admission webhook is not reachable."""

    def attempt() -> bool:
        done = kubectl(kubeconfig, "apply", "-n", namespace, "-f", str(QUICKSTART))
        if done.returncode != 0 and "failed calling webhook" not in done.stderr:
            raise AssertionError(done.stderr)
        return done.returncode == 0

    await eventually(attempt, what="examples/quickstart applied")


async def test_quickstart_rollout(
    api: client.ApiClient, kubeconfig: Path, namespace: str, operator: Operator
) -> None:
    core = client.CoreV1Api(api)
    web = Workload(api, namespace, "web")
    async with running_traffic_controller(api, namespace, path=TRAFFIC_CONTROLLER):
        await apply_quickstart(kubeconfig, namespace)
        pods = await web.settled(replicas=6, image="nginx:1.25")
        assert sorted(await backends(api, namespace)) == sorted(p.metadata.name for p in pods)

        available: dict[str, bool] = {}
        most_unavailable = 0
        verdicts: list[dict[str, Any]] = []

        async def on_pod(kind: str, pod: dict[str, Any]) -> None:
            nonlocal most_unavailable
            meta = pod["metadata"]
            if kind == "DELETED":
                available.pop(meta["name"], None)
            else:
                available[meta["name"]] = SERVICE_AVAILABLE in (meta.get("labels") or {})
            most_unavailable = max(most_unavailable, sum(not a for a in available.values()))

        async def on_rule(kind: str, rule: dict[str, Any]) -> None:
            verdicts.extend((rule.get("status") or {}).get("details") or [])

        custom = client.CustomObjectsApi(api)
        out = io.StringIO()
        async with (
            following(core.list_namespaced_pod, namespace, label_selector="app=web", on_event=on_pod),
            following(
                custom.list_namespaced_custom_object,
                "apps.kusionstack.io",
                "v1alpha1",
                namespace,
                "podtransitionrules",
                on_event=on_rule,
            ),
        ):
            patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": NEW}]
            patch_args = ["patch", "-n", namespace, "cls", "web", "--type=json", f"-p={json.dumps(patch)}"]
            patched = kubectl(kubeconfig, *patch_args)
            assert patched.returncode == 0, patched.stderr
            code, message = await asyncio.wait_for(
                follow_rollout(api, namespace=namespace, name="web", display=PlainDisplay(out=out)),
                timeout=240,
            )
            updated = await web.settled(replicas=6, image=NEW)

    assert (code, message.split(",")[0]) == (
        EXIT_COMPLETE,
        "rollout complete: 6 of 6 pods updated and available",
    )
    narrative = out.getvalue()
    for name, point in (("db-migrate", 0), ("smoke-test", 3), ("notify", 6)):
        assert f"hook {name} (at {point} available pods): Running" in narrative, narrative
    assert "[one-at-a-time] blocked by max unavailable policy" in narrative  # the wait reason is shown

    # The budget: one pod out of service at a time; both rules passed the pods they let through.
    assert most_unavailable == 1
    passed = [set(d.get("passedRules") or []) for d in verdicts if d.get("passed")]
    assert {"one-at-a-time", "ready-label"} in passed
    assert any(
        r.get("ruleName") == "one-at-a-time" for d in verdicts if not d.get("passed") for r in d["rejectInfo"]
    )

    status = await web.status()
    hooks = {h["name"]: h for h in status["hooks"] if h["revision"] == status["updatedRevision"]}
    assert {n: (h["point"], h["phase"]) for n, h in hooks.items()} == {
        "db-migrate": (0, "Succeeded"),
        "smoke-test": (3, "Succeeded"),
        "notify": (6, "Succeeded"),
    }
    jobs = {j.metadata.name: j for j in await web.jobs()}
    assert set(jobs) == {h["jobName"] for h in hooks.values()}
    first = status["currentRevision"]
    for job in jobs.values():
        (container,) = job.spec.template.spec.containers
        assert container.command == HOOK_COMMAND
        env = {e.name: e.value for e in container.env}
        assert env["K8S_ROLLOUT_TO_OBJECT"] == f"{namespace}/{first}"
        assert env["K8S_ROLLOUT_TYPE"] == "ROLLOUT"
        assert env["K8S_ROLLOUT_FROM_OBJECT"].startswith(f"{namespace}/web-")
    assert sorted(await backends(api, namespace)) == sorted(p.metadata.name for p in updated)

"""examples/transition-rule/: the KusionStack PodTransitionRule sample gating the updates of CollaSet foo.

Its budget lets 2 of the 4 pods through PreCheck at a time, its label check holds every pod
until it is labelled ``app.custom/ready=true``, and its PostCheck webhook (failurePolicy Fail,
with polling) is served by the example's ``webhook_server.py``, run here as the README runs it.
The one change to the example's files: the server listens on a free port instead of 8089, so
the rule's URLs are rewritten to that port in a copy before ``kubectl apply``.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from lifecycle.labels import SERVICE_AVAILABLE
from rollouts.operator.running import free_port
from tests.cluster_support import Operator, eventually
from tests.examples.support import EXAMPLES, Example
from tests.integration.ptr_support import Cluster
from tests.integration.test_collaset_support import STEP_TIMEOUT, Workload

pytestmark = [pytest.mark.integration, pytest.mark.examples]

DIRECTORY = EXAMPLES / "transition-rule"
RULE = "podtransitionrule-sample"
OLD, NEW = "nginx:1.25", "nginx:1.26"
SAMPLE_ADDRESS = "http://127.0.0.1:8089/"


@dataclass
class WebhookServer:
    """``python3 webhook_server.py --port N`` as a child process; its output lines once stopped."""

    port: int
    process: asyncio.subprocess.Process | None = None
    lines: list[str] = field(default_factory=list)

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(DIRECTORY / "webhook_server.py"),
            "--port",
            str(self.port),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        assert self.process.stdout is not None
        first = await asyncio.wait_for(self.process.stdout.readline(), timeout=15)
        assert first.decode().strip() == f"listening on http://127.0.0.1:{self.port}", first

    async def stop(self) -> list[str]:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            out, _ = await self.process.communicate()
            self.lines = out.decode().splitlines()
        return self.lines


@pytest.fixture
async def webhook_server() -> AsyncIterator[WebhookServer]:
    server = WebhookServer(port=free_port())
    await server.start()
    yield server
    await server.stop()


def copy_with_port(target: Path, port: int) -> Path:
    """The example's manifests with the webhook address moved to ``127.0.0.1:<port>``."""
    for manifest in sorted(DIRECTORY.glob("*.yaml")):
        text = manifest.read_text()
        if manifest.name == "podtransitionrule.yaml":
            assert text.count(SAMPLE_ADDRESS) == 2, "the rule's url and poll url"
            text = text.replace(SAMPLE_ADDRESS, f"http://127.0.0.1:{port}/")
        (target / manifest.name).write_text(text)
    return target


def rejections(details: dict[str, dict[str, Any]]) -> dict[str, tuple[str, ...]]:
    """Pod -> names of the rules holding it."""
    return {name: tuple(r["ruleName"] for r in d.get("rejectInfo") or []) for name, d in details.items()}


async def test_sample_rule_holds_pods_by_budget_and_labels_then_the_webhook_approves(
    api: client.ApiClient,
    kubeconfig: Path,
    namespace: str,
    operator: Operator,
    webhook_server: WebhookServer,
    tmp_path: Path,
) -> None:
    example = Example(kubeconfig, namespace)
    await example.apply(copy_with_port(tmp_path, webhook_server.port))
    foo = Workload(api, namespace, "foo")
    ptr = Cluster(api=api, namespace=namespace)
    names = sorted(p.metadata.name for p in await foo.settled(replicas=4, image=OLD))

    async def targets_seen() -> bool:
        status = await ptr.status(RULE)
        return list(status.get("targets") or []) == names

    await eventually(targets_seen, what=f"{RULE} selecting the 4 pods of foo")

    await example.set_image("cls", "foo", NEW)

    # Every pod is in PreCheck. The budget (50% of 4) approves the first two by name, which the
    # label check then rejects; the other two are held by the budget: approved pods count as
    # unavailable while they wait, so the budget is spent.
    async def held_in_pre_check() -> dict[str, dict[str, Any]] | None:
        details = await ptr.details(RULE)
        expected = {
            names[0]: ("labelCheck",),
            names[1]: ("labelCheck",),
            names[2]: ("maxUnavailable",),
            names[3]: ("maxUnavailable",),
        }
        if rejections(details) != expected or {d["stage"] for d in details.values()} != {"PreCheck"}:
            return None
        return details

    details = await eventually(held_in_pre_check, timeout=STEP_TIMEOUT, what="all 4 pods held in PreCheck")
    for name in names[:2]:
        assert details[name]["passedRules"] == ["maxUnavailable"]
        (info,) = details[name]["rejectInfo"]
        assert "app.custom/ready=true" in info["reason"], info
    for name in names[2:]:
        assert details[name]["passedRules"] == []
        (info,) = details[name]["rejectInfo"]
        assert "blocked by max unavailable policy" in info["reason"], info
        assert "[max unavailable]=2/4" in info["reason"], info
    assert (await ptr.status(RULE))["summary"] == {"selected": 4, "passed": 0, "rejected": 4}
    update = await foo.condition("Update") or {}
    assert f"[ptr {RULE}]" in update.get("message", ""), update
    assert all(p.spec.containers[0].image == OLD for p in await foo.pods()), "no pod updated yet"

    # The first two go through; the budget holds the other two until they are back. The
    # first two leave PreCheck (and the status) moments after they pass, so every version of
    # the status is looked at, not samples of it.
    async with ptr.every_details(RULE) as versions:
        await example.kubectl("label", "pods", "-l", "app=foo", "app.custom/ready=true")

        def budget_holds_two() -> bool:
            for details in versions:
                found = rejections(details)
                if (
                    found.get(names[2]) == ("maxUnavailable",)
                    and found.get(names[3]) == ("maxUnavailable",)
                    and (found.get(names[0]) == () or found.get(names[1]) == ())
                ):
                    return True
            return False

        await eventually(budget_holds_two, timeout=STEP_TIMEOUT, what="the budget holding the last two pods")

    most_unavailable = 0
    held_by_webhook: set[str] = set()

    async def rolled_out() -> bool:
        nonlocal most_unavailable
        pods = await foo.pods()
        most_unavailable = max(
            most_unavailable, sum(SERVICE_AVAILABLE not in p.metadata.labels for p in pods)
        )
        for name, detail in (await ptr.details(RULE)).items():
            if detail["stage"] == "PostCheck" and rejections({name: detail})[name] == ("webhookCheck",):
                held_by_webhook.add(name)
        return len(pods) == 4 and all(
            p.spec.containers[0].image == NEW and SERVICE_AVAILABLE in p.metadata.labels for p in pods
        )

    await eventually(rolled_out, timeout=2 * STEP_TIMEOUT, interval=0.1, what="foo rolled out to nginx:1.26")
    await foo.settled(replicas=4, image=NEW)
    assert 1 <= most_unavailable <= 2, most_unavailable
    assert held_by_webhook, "some pod was seen waiting in PostCheck for the webhook's poll"

    # The webhook approved every pod through its poll tasks, recorded in the rule's status.
    status = await ptr.status(RULE)
    (webhook,) = [s for s in status["ruleStates"] if s["name"] == "webhookCheck"]
    approved = {pod for task in webhook["webhookStatus"]["history"] for pod in task["approved"]}
    assert approved == set(names)
    lines = await webhook_server.stop()
    posted = [line for line in lines if line.startswith("POST /post-stop stage=PostCheck")]
    finished = [line for line in lines if line.startswith("GET /fetch-result") and "-> finished" in line]
    assert posted and finished, lines
    assert {name for name in names if any(name in line for line in finished)} == set(names), lines

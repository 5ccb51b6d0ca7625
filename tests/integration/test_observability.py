"""Tracing and metrics after a real rollout: a pod held by a PodTransitionRule webhook, then a hook.

The operator runs with its health server on a free port; the test reads ``/metrics`` before and
after the rollout and checks the families moved by what happened, and runs ``rollouts trace``
as a user would (a subprocess with the cluster's kubeconfig).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from prometheus_client.parser import text_string_to_metric_families

from lifecycle.history import HISTORY_ANNOTATION, parse_history
from rollouts.operator.running import free_port
from tests.cluster_support import Operator, eventually
from tests.integration.ptr_support import Cluster, HookServer, answer, rule_manifest, webhook_rule
from tests.integration.test_collaset_support import Workload, hook, manifest

pytestmark = pytest.mark.integration

NEW = "example.com/app:2"
RULE = "change-freeze"
PTR = "freeze"
#: The phases of a single operation, in lifecycle order.
ORDER = [
    "Begun",
    "PreCheck",
    "PreChecked",
    "Preparing",
    "Operating",
    "Operated",
    "PostCheck",
    "PostChecked",
    "Completing",
]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(port: int, path: str = "/metrics") -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as response:
        return response.status, await response.text()


def samples(text: str) -> Samples:
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


def total(found: Samples, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, lbls), v in found.items() if n == name and wanted <= set(lbls))


async def rollouts_cli(kubeconfig: Path, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rollouts.cli", *args, "--kubeconfig", str(kubeconfig),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    return out.decode()


async def test_trace_and_metrics_after_a_held_rollout_with_a_hook(
    api: client.ApiClient, namespace: str, operator: Operator, kubeconfig: Path
) -> None:
    port = free_port()
    operator.restart(health_port=port)
    assert await scrape(port, "/healthz") == (200, "ok\n")
    ready = await eventually(lambda: _ready(port), what="/readyz answering 200")
    assert ready == "ready\n"

    frozen = {"on": True}

    def check(_: web.Request, __: dict[str, Any] | None) -> web.Response:
        if frozen["on"]:
            return answer({"success": False, "message": "change freeze until the test lifts it"})
        return answer({"success": True, "message": "go"})

    server = await HookServer(routes={("POST", "/check"): check}).start()
    try:
        web_cls = Workload(api, namespace, "web")
        await web_cls.create(manifest("web", replicas=1, lifecycleHooks=[hook("smoke", "100%")]))
        (pod_before,) = await web_cls.settled(replicas=1)
        cluster = Cluster(api, namespace)
        await cluster.create_rule(rule_manifest(PTR, [webhook_rule(RULE, f"{server.base}/check")], app="web"))
        before = samples((await scrape(port))[1])

        await web_cls.set_image(NEW)
        pod_name = pod_before.metadata.name

        async def rejected() -> bool:
            detail = (await cluster.details(PTR)).get(pod_name)
            infos = (detail or {}).get("rejectInfo") or []
            return bool(detail) and not detail["passed"] and any(i["ruleName"] == RULE for i in infos)

        await eventually(rejected, timeout=60, what=f"{pod_name} rejected by {PTR}/{RULE}")

        async def announced() -> bool:
            events = await cluster.events(kind="Pod", name=pod_name)
            return any(reason == "TransitionRuleRejected" for _, reason, _ in events)

        await eventually(announced, what="the rejection announced on the pod")
        frozen["on"] = False
        (pod,) = await web_cls.settled(replicas=1, image=NEW, timeout=120)
        assert pod.metadata.name == pod_name, "the update is in place"
        assert [h["phase"] for h in (await web_cls.status())["hooks"]] == ["Succeeded"]

        history = parse_history((pod.metadata.annotations or {}).get(HISTORY_ANNOTATION))
        assert not history.live
        assert [(r.id, r.type, r.outcome) for r in history.done] == [
            ("collaset-update", "update", "Completed")
        ]

        # -- rollouts trace pod/NAME: the phases in order, the holding rule named ------------------
        text = await rollouts_cli(kubeconfig, "trace", f"pod/{pod_name}", "-n", namespace)
        rows = [line.split()[0] for line in text.splitlines() if line.startswith("  ") and line.split()]
        phases = [row for row in rows if row in ORDER]
        assert phases == [p for p in ORDER if p in phases], text
        assert {"Begun", "PreCheck", "Operating", "Completing"} <= set(phases), text
        assert "operation collaset-update  type update  Completed" in text, text
        assert f"held by podtransitionrule {PTR} (rule {RULE}: " in text, text

        document = json.loads(
            await rollouts_cli(kubeconfig, "trace", f"pod/{pod_name}", "-n", namespace, "-o", "json")
        )
        assert document["kind"] == "PodTrace"
        (op,) = document["operations"]
        assert op["outcome"] == "Completed"
        steps = [s["phase"] for s in op["steps"]]
        assert steps == [p for p in ORDER if p in steps]
        entered = {s["phase"]: s["entered"] for s in op["steps"]}
        holds = [h for h in op["holds"] if h["by"] == f"podtransitionrule {PTR}"]
        assert len(holds) == 1, op["holds"]
        (hold,) = holds
        assert hold["phase"] == "PreCheck" and hold["reason"].startswith(f"rule {RULE}: "), hold
        # RFC 3339 with milliseconds, all UTC: string order is time order
        assert entered["PreCheck"] <= hold["since"] <= hold["until"] <= op["ended"], (
            entered,
            hold,
            op["ended"],
        )

        # -- rollouts trace cls/NAME: points, hooks, jobs, pods --------------------------------------
        text = await rollouts_cli(kubeconfig, "trace", "cls/web", "-n", namespace)
        assert "smoke" in text and "100%" in text and "Succeeded" in text, text
        assert pod_name in text, text
        document = json.loads(
            await rollouts_cli(kubeconfig, "trace", "cls/web", "-n", namespace, "-o", "json")
        )
        assert [(h["name"], h["progress_point"], h["point"], h["phase"]) for h in document["hooks"]] == [
            ("smoke", "100%", 1, "Succeeded")
        ]
        (job,) = document["jobs"]
        assert (job["hook"], job["outcome"]) == ("smoke", "Succeeded")
        assert job["name"] == document["hooks"][0]["job"]
        (summary,) = document["pods"]
        assert (summary["name"], summary["operation"], summary["outcome"]) == (
            pod_name,
            "collaset-update",
            "Completed",
        )
        assert summary["held_by"] and summary["held_by"][0].startswith(f"podtransitionrule {PTR} ")

        # -- /metrics: what happened -----------------------------------------------------------------
        async def hook_counted() -> Samples | None:
            found = samples((await scrape(port))[1])
            return (
                found if delta(before, found, "rollouts_hook_runs_total", outcome="Succeeded") >= 1 else None
            )

        after = await eventually(hook_counted, what="the hook run counted")
        assert delta(before, after, "rollouts_hook_runs_total", outcome="Succeeded") == 1
        assert delta(before, after, "rollouts_hook_runs_total", outcome="Failed") == 0
        assert delta(before, after, "rollouts_hook_duration_seconds_count", outcome="Succeeded") == 1
        assert delta(before, after, "rollouts_rollout_duration_seconds_count", outcome="Completed") == 1
        for phase in ("PreCheck", "Operating", "Completing", "Completed"):
            assert (
                delta(before, after, "rollouts_lifecycle_transitions_total", phase=phase, type="update") == 1
            ), phase
        assert (
            delta(
                before,
                after,
                "rollouts_lifecycle_phase_duration_seconds_count",
                phase="PreCheck",
                type="update",
            )
            == 1
        )
        rejected_verdicts = delta(
            before,
            after,
            "rollouts_rule_verdicts_total",
            kind="webhook",
            stage="PreCheck",
            outcome="rejected",
        )
        passed_verdicts = delta(
            before, after, "rollouts_rule_verdicts_total", kind="webhook", stage="PreCheck", outcome="passed"
        )
        assert rejected_verdicts >= 1 and passed_verdicts >= 1, (rejected_verdicts, passed_verdicts)
        webhook_calls = delta(
            before, after, "rollouts_rule_webhook_request_duration_seconds_count", call="request"
        )
        assert webhook_calls == len(server.requests("POST", "/check")) >= 2
        assert total(after, "rollouts_api_requests_total", verb="patch", resource="pods") > 0
        assert total(after, "rollouts_api_requests_total", verb="watch") > 0
        for controller in ("lifecycle", "podtransitionrule", "collaset"):
            assert total(after, "rollouts_reconcile_duration_seconds_count", controller=controller) > 0, (
                controller
            )
        assert ("rollouts_reconcile_queue_depth", frozenset({("controller", "collaset")})) in after
        assert total(after, "rollouts_lifecycle_pods", phase="ServiceAvailable") >= 1
    finally:
        await server.stop()


async def _ready(port: int) -> str | None:
    status, text = await scrape(port, "/readyz")
    return text if status == 200 else None

"""The PodTransitionRule controller against the real control plane, with real webhook servers.

Pods are put in a stage by hand (lifecycle labels) and the operator runs with the PTR controller
only (``controllers={"transitionrules"}``), so nothing else moves the pods while a test looks
at the rule's status, the pods' detail annotations and the Events.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio import client

from lifecycle.rules.evaluating import gate_from_status
from lifecycle.rules.models import PodTransitionRule, Stage
from lifecycle.rules.subjects import PodView
from rollouts.operator.handlers.transitionrules import COUNTS
from rollouts.operator.running import free_port
from tests.cluster_support import Operator, eventually
from tests.integration.ptr_support import (
    Cluster,
    HookServer,
    admission_error,
    answer,
    kubectl_binary,
    make_tls,
    pod_manifest,
    rule_manifest,
    webhook_rule,
)

pytestmark = pytest.mark.integration

#: How soon a pod change must show in the rule's verdicts (the controller reacts to pod events).
REACTION_SECONDS = 3.0


@pytest.fixture(scope="module")
def ptr_operator(operator: Operator) -> Iterator[Operator]:
    """The session's operator, restarted with the PTR controller alone for this module."""
    original = operator.cfg
    operator.stop()
    operator.cfg = replace(original, controllers=frozenset({"transitionrules"}))
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
        operator.cfg = original
        operator.start()


@pytest.fixture
def cluster(api: client.ApiClient, namespace: str, ptr_operator: Operator) -> Cluster:
    return Cluster(api=api, namespace=namespace)


@pytest.fixture
async def hook() -> AsyncIterator[HookServer]:
    server = await HookServer().start()
    yield server
    await server.stop()


def budget_rule(name: str = "budget", **policy: Any) -> dict[str, Any]:
    return {"name": name, "availablePolicy": policy}


async def settled(cluster: Cluster, ptr: str, *, passed: set[str], rejected: set[str]) -> dict[str, Any]:
    """Wait until exactly ``passed`` passed and ``rejected`` are held back; the details by pod."""

    async def probe() -> dict[str, Any] | None:
        details = await cluster.details(ptr)
        got_passed = {name for name, d in details.items() if d["passed"]}
        got_rejected = {name for name, d in details.items() if not d["passed"]}
        return details if (got_passed, got_rejected) == (passed, rejected) else None

    return dict(
        await eventually(
            probe, timeout=30, what=f"{ptr}: passed {sorted(passed)}, rejected {sorted(rejected)}"
        )
    )


async def annotated(cluster: Cluster, ptr: str, expected: dict[str, dict[str, Any] | None]) -> None:
    async def probe() -> bool:
        found = await cluster.annotations(ptr)
        return all(found.get(pod) == value for pod, value in expected.items())

    await eventually(probe, timeout=30, what=f"{ptr} annotations {expected}")


def reason(details: dict[str, Any], pod: str) -> str:
    infos = details[pod]["rejectInfo"]
    assert len(infos) == 1, infos
    return f"{infos[0]['ruleName']}: {infos[0]['reason']}"


PASSED = {"stage": "PreCheck", "passed": True}
HELD = {"stage": "PreCheck", "passed": False}


# -- availablePolicy ------------------------------------------------------------------------------


async def test_half_of_four_lets_exactly_two_available_pods_through_and_holds_them(cluster: Cluster) -> None:
    await cluster.create_pods(*(pod_manifest(f"pod-{n}", available=True) for n in "abcd"))
    await cluster.create_rule(rule_manifest("half", [budget_rule(maxUnavailableValue="50%")]))

    details = await settled(cluster, "half", passed={"pod-a", "pod-b"}, rejected={"pod-c", "pod-d"})
    assert reason(details, "pod-c") == (
        "budget: [budget] blocked by max unavailable policy: [max unavailable]=2/4, [current unavailable]=2/4"
    )
    assert details["pod-a"]["passedRules"] == ["budget"]
    await annotated(cluster, "half", {"pod-a": PASSED, "pod-b": PASSED, "pod-c": HELD, "pod-d": HELD})
    status = await cluster.status("half")
    assert status["targets"] == ["pod-a", "pod-b", "pod-c", "pod-d"]
    assert status["summary"] == {"selected": 4, "passed": 2, "rejected": 2}

    # The approved pods keep their slots while they still look available: an unrelated change
    # wakes the rule, and the verdicts stay.
    looked = COUNTS.reconciles
    await cluster.label_pod("pod-d", {"unrelated": "touch"})
    await eventually(lambda: COUNTS.reconciles > looked, what="the rule to look again after the label change")
    await settled(cluster, "half", passed={"pod-a", "pod-b"}, rejected={"pod-c", "pod-d"})

    # Waiting for the budget is queueing: one summary on the rule, no Event per held pod.
    async def summaries() -> list[tuple[str, str, str]]:
        events = await cluster.events(kind="PodTransitionRule", name="half")
        return [e for e in events if e[1] == "PodsRejected"]

    events = await eventually(summaries, what="the rule's summary of the held pods")
    assert len(events) == 1 and "by budget: [budget] blocked by max unavailable policy" in events[0][2]
    for held in ("pod-c", "pod-d"):
        on_pod = [e for e in await cluster.events(kind="Pod", name=held) if e[1].startswith("TransitionRule")]
        assert on_pod == []


async def test_unavailable_pods_pass_first_and_a_third_one_passes_as_soon_as_it_is_unavailable(
    cluster: Cluster,
) -> None:
    await cluster.create_pods(
        pod_manifest("pod-a", available=True),
        pod_manifest("pod-b", available=True),
        pod_manifest("pod-c", available=False),
        pod_manifest("pod-d", available=False),
    )
    await cluster.create_rule(rule_manifest("half", [budget_rule(maxUnavailableValue="50%")]))
    details = await settled(cluster, "half", passed={"pod-c", "pod-d"}, rejected={"pod-a", "pod-b"})
    assert "[current unavailable]=2/4" in reason(details, "pod-a")

    await cluster.label_pod("pod-b", {"podopslifecycle.kusionstack.io/service-available": None})
    loop = asyncio.get_running_loop()
    started = loop.time()

    async def b_passed() -> bool:
        return "pod-b" in await cluster.passed("half")

    await eventually(b_passed, timeout=REACTION_SECONDS, what="pod-b to pass once unavailable")
    assert loop.time() - started < REACTION_SECONDS
    details = await settled(cluster, "half", passed={"pod-b", "pod-c", "pod-d"}, rejected={"pod-a"})
    assert "[current unavailable]=3/4" in reason(details, "pod-a")


async def test_min_available_keeps_three_of_four_available(cluster: Cluster) -> None:
    await cluster.create_pods(*(pod_manifest(f"pod-{n}", available=True) for n in "abcd"))
    await cluster.create_rule(rule_manifest("floor", [budget_rule("keep", minAvailableValue=3)]))
    details = await settled(cluster, "floor", passed={"pod-a"}, rejected={"pod-b", "pod-c", "pod-d"})
    assert reason(details, "pod-b") == (
        "keep: blocked by min available policy: [min available]=3/4, [current keep available]=3/4"
    )


# -- labelCheck -----------------------------------------------------------------------------------


async def test_label_check_with_match_expressions(cluster: Cluster) -> None:
    await cluster.create_pods(
        pod_manifest("ready", extra_labels={"app.custom/ready": "true"}),
        pod_manifest("unready"),
        pod_manifest("forbidden", extra_labels={"app.custom/ready": "true", "app.custom/forbidden": "x"}),
        pod_manifest("idle", stage=None),
    )
    check = {
        "name": "labels",
        "labelCheck": {
            "requires": {
                "matchLabels": {"app.custom/ready": "true"},
                "matchExpressions": [{"key": "app.custom/forbidden", "operator": "DoesNotExist"}],
            }
        },
    }
    await cluster.create_rule(rule_manifest("labels", [check]))
    details = await settled(cluster, "labels", passed={"ready"}, rejected={"unready", "forbidden"})
    ns = cluster.namespace
    assert reason(details, "forbidden") == (
        f"labels: block by label check policy, pod {ns}/forbidden labels not match "
        "!app.custom/forbidden,app.custom/ready=true"
    )
    # a selected pod in no stage gets no detail and Operating's "Unknown" annotation
    await annotated(cluster, "labels", {"idle": {"stage": "Unknown", "passed": True}, "unready": HELD})

    await cluster.label_pod("unready", {"app.custom/ready": "true"})
    await cluster.label_pod("forbidden", {"app.custom/forbidden": None})
    await settled(cluster, "labels", passed={"ready", "unready", "forbidden"}, rejected=set())
    await annotated(cluster, "labels", {"ready": PASSED, "unready": PASSED, "forbidden": PASSED})


# -- webhooks -------------------------------------------------------------------------------------


async def _running_with_ip(cluster: Cluster, *names: str) -> dict[str, str]:
    async def probe() -> dict[str, str] | None:
        ips = {}
        for name in names:
            pod = await cluster.core.read_namespaced_pod(name, cluster.namespace)
            if not pod.status.pod_ip:
                return None
            ips[name] = pod.status.pod_ip
        return ips

    return dict(await eventually(probe, what=f"pods {names} running with an IP"))


async def test_webhook_success_passes_the_pods_in_the_stage_with_their_parameters(
    cluster: Cluster, hook: HookServer
) -> None:
    hook.routes[("POST", "/check")] = lambda request, body: answer({"success": True, "message": "ok"})
    context = {"test.io/context": "blue"}
    await cluster.create_pods(
        pod_manifest("pod-a", annotations=context),
        pod_manifest("pod-b", annotations=context),
        pod_manifest("pod-c", stage=None, annotations=context),
    )
    ips = await _running_with_ip(cluster, "pod-a", "pod-b")
    parameters = [
        {"key": "podIP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {
            "key": "context",
            "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['test.io/context']"}},
        },
    ]
    rule = webhook_rule("check", f"{hook.base}/check", parameters=parameters)
    await cluster.create_rule(rule_manifest("hooked", [rule]))
    details = await settled(cluster, "hooked", passed={"pod-a", "pod-b"}, rejected=set())
    assert details["pod-a"]["passedRules"] == ["check"]
    await annotated(cluster, "hooked", {"pod-a": PASSED, "pod-c": {"stage": "Unknown", "passed": True}})

    posts = hook.requests("POST", "/check")
    assert len(posts) == 1
    body = posts[0].body
    assert body is not None
    assert body["ruleName"] == "check" and body["stage"] == "PreCheck" and body["traceId"]
    assert body["resources"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "parameters": {"podIP": ips[name], "context": "blue"},
        }
        for name in ("pod-a", "pod-b")
    ]


async def test_webhook_rejection_is_visible_on_the_rule_and_the_pod_without_spamming_events(
    cluster: Cluster, hook: HookServer, kubeconfig: Path
) -> None:
    hook.routes[("POST", "/check")] = lambda request, body: answer(
        {"success": False, "message": "change freeze until monday"}
    )
    await cluster.create_pods(pod_manifest("pod-a"))
    await cluster.create_rule(rule_manifest("freeze", [webhook_rule("freeze-check", f"{hook.base}/check")]))
    details = await settled(cluster, "freeze", passed=set(), rejected={"pod-a"})
    text = reason(details, "pod-a")
    assert text.startswith(f"freeze-check: Webhook check {cluster.namespace}/freeze/freeze-check rejected")
    assert text.endswith("msg: change freeze until monday")
    await annotated(cluster, "freeze", {"pod-a": HELD})

    # a rejected pod is asked about again after a while; the same answer posts no new Event
    await eventually(lambda: len(hook.requests("POST", "/check")) >= 2, timeout=20, what="a second request")

    async def pod_event() -> list[tuple[str, str, str]]:
        events = await cluster.events(kind="Pod", name="pod-a")
        return [e for e in events if e[1] == "TransitionRuleRejected"]

    events = await eventually(pod_event, what="a rejection Event on the pod")
    assert len(events) == 1
    assert events[0][0] == "Warning"
    assert "freeze-check" in events[0][2] and "change freeze until monday" in events[0][2]

    async def rule_event() -> list[tuple[str, str, str]]:
        events = await cluster.events(kind="PodTransitionRule", name="freeze")
        return [e for e in events if e[1] == "PodsRejected"]

    events = await eventually(rule_event, what="a rejection Event on the rule")
    assert len(events) == 1 and "pod-a" in events[0][2]

    async def describe(*what: str) -> str:
        process = await asyncio.create_subprocess_exec(
            kubectl_binary(), "--kubeconfig", str(kubeconfig), "-n", cluster.namespace, "describe", *what,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await process.communicate()
        assert process.returncode == 0, out.decode()
        return out.decode()

    described = await describe("ptr", "freeze")
    assert "freeze-check" in described and "change freeze until monday" in described
    assert "PodsRejected" in described
    described = await describe("pod", "pod-a")
    assert 'detail.podtransitionrule.kusionstack.io/freeze: {"stage":"PreCheck","passed":false}' in described
    assert "TransitionRuleRejected" in described and "freeze-check" in described


async def test_webhook_partial_approval_passes_the_finished_names(cluster: Cluster, hook: HookServer) -> None:
    hook.routes[("POST", "/check")] = lambda request, body: answer(
        {"success": False, "message": "one at a time", "finishedNames": ["pod-a"]}
    )
    await cluster.create_pods(pod_manifest("pod-a"), pod_manifest("pod-b"))
    await cluster.create_rule(rule_manifest("partial", [webhook_rule("check", f"{hook.base}/check")]))
    details = await settled(cluster, "partial", passed={"pod-a"}, rejected={"pod-b"})
    assert "msg: one at a time" in reason(details, "pod-b")
    await annotated(cluster, "partial", {"pod-a": PASSED, "pod-b": HELD})


def _polling(hook: HookServer, *, task: str, pods: list[str], finish: bool = True) -> None:
    """POST /start answers with a poll task; each GET /fetch approves one more pod."""
    polls = {"count": 0}

    def start(request: web.Request, body: dict[str, Any] | None) -> web.Response:
        return answer({"success": True, "poll": True, "taskId": task, "message": "accepted"})

    def fetch(request: web.Request, body: dict[str, Any] | None) -> web.Response:
        if not finish:
            return answer({"success": True, "finished": False, "message": "still working"})
        polls["count"] += 1
        names = pods[: polls["count"]]
        return answer(
            {
                "success": True,
                "finished": len(names) == len(pods),
                "finishedNames": names,
                "message": f"{len(names)} done",
            }
        )

    hook.routes[("POST", "/start")] = start
    hook.routes[("GET", "/fetch")] = fetch


async def test_webhook_polling_approves_pods_over_several_polls(cluster: Cluster, hook: HookServer) -> None:
    pods = ["pod-a", "pod-b", "pod-c"]
    _polling(hook, task="task-1", pods=pods)
    await cluster.create_pods(*(pod_manifest(name) for name in pods))
    poll = {"url": f"{hook.base}/fetch", "intervalSeconds": 1, "timeoutSeconds": 30}
    await cluster.create_rule(
        rule_manifest("polled", [webhook_rule("slow", f"{hook.base}/start", poll=poll)])
    )

    seen: list[int] = []

    async def all_passed() -> bool:
        passed = len(await cluster.passed("polled"))
        if not seen or seen[-1] != passed:
            seen.append(passed)
        return passed == 3

    await eventually(all_passed, timeout=30, what="every pod approved by polling")
    assert seen[-3:] == [1, 2, 3], seen
    assert len(hook.requests("POST", "/start")) == 1
    gets = hook.requests("GET", "/fetch")
    assert len(gets) == 3 and all(g.query == {"task-id": "task-1"} for g in gets)
    status = await cluster.status("polled")
    [rule_state] = status["ruleStates"]
    assert rule_state["webhookStatus"].get("taskStates", []) == []
    assert rule_state["webhookStatus"]["history"][0]["taskId"] == "task-1"


async def test_webhook_poll_timeout_rejects_the_pods_and_asks_again(
    cluster: Cluster, hook: HookServer
) -> None:
    _polling(hook, task="task-t", pods=["pod-a"], finish=False)
    await cluster.create_pods(pod_manifest("pod-a"))
    poll = {"url": f"{hook.base}/fetch", "intervalSeconds": 1, "timeoutSeconds": 2}
    await cluster.create_rule(
        rule_manifest("timeout", [webhook_rule("slow", f"{hook.base}/start", poll=poll)])
    )

    async def timed_out() -> str | None:
        details = await cluster.details("timeout")
        if "pod-a" not in details or details["pod-a"]["passed"]:
            return None
        text = reason(details, "pod-a")
        return text if "Polling Timeout" in text else None

    text = await eventually(timed_out, timeout=30, what="the poll task to time out")
    assert "polling task task-t stopped: Polling Timeout. still working" in text
    await eventually(
        lambda: len(hook.requests("POST", "/start")) >= 2,
        timeout=20,
        what="a fresh request after the timeout",
    )


@pytest.mark.parametrize("policy", ["Ignore", "Fail"])
async def test_webhook_that_is_down(cluster: Cluster, policy: str) -> None:
    url = f"http://127.0.0.1:{free_port()}/check"  # nothing listens there
    await cluster.create_pods(pod_manifest("pod-a"))
    await cluster.create_rule(rule_manifest("down", [webhook_rule("check", url, failure_policy=policy)]))
    if policy == "Ignore":
        await settled(cluster, "down", passed={"pod-a"}, rejected=set())

        async def warned() -> list[tuple[str, str, str]]:
            events = await cluster.events(kind="PodTransitionRule", name="down")
            return [e for e in events if e[1] == "WebhookFailureIgnored"]

        [(kind, _, message)] = await eventually(warned, what="a WebhookFailureIgnored Event")
        assert kind == "Warning" and "passed by failurePolicy Ignore" in message and url in message
    else:
        details = await settled(cluster, "down", passed=set(), rejected={"pod-a"})
        text = reason(details, "pod-a")
        assert text.startswith(
            f"check: Fail to do webhook request {cluster.namespace}/down/check, POST {url}"
        )
        assert "traceId" in text


async def test_webhook_tls_trusts_only_its_ca_bundle(cluster: Cluster) -> None:
    tls = make_tls()
    other = make_tls()
    server = await HookServer().start(tls=tls.context)
    server.routes[("POST", "/check")] = lambda request, body: answer({"success": True})
    try:
        await cluster.create_pods(
            pod_manifest("trusting", app="trusting"), pod_manifest("wrong", app="wrong")
        )
        good = webhook_rule("check", f"{server.base}/check", ca_bundle=tls.ca_bundle)
        bad = webhook_rule("check", f"{server.base}/check", ca_bundle=other.ca_bundle)
        await cluster.create_rule(rule_manifest("trusting", [good], app="trusting"))
        await cluster.create_rule(rule_manifest("wrong", [bad], app="wrong"))
        await settled(cluster, "trusting", passed={"trusting"}, rejected=set())
        details = await settled(cluster, "wrong", passed=set(), rejected={"wrong"})
        assert "certificate verify failed" in reason(details, "wrong")
    finally:
        await server.stop()


async def test_operator_restart_during_a_poll_resumes_the_task_from_status(
    cluster: Cluster, hook: HookServer, ptr_operator: Operator
) -> None:
    restarted = asyncio.Event()

    def start(request: web.Request, body: dict[str, Any] | None) -> web.Response:
        return answer({"success": True, "poll": True, "taskId": "task-r"})

    def fetch(request: web.Request, body: dict[str, Any] | None) -> web.Response:
        return answer({"success": True, "finished": restarted.is_set(), "message": "working"})

    hook.routes[("POST", "/start")] = start
    hook.routes[("GET", "/fetch")] = fetch
    await cluster.create_pods(pod_manifest("pod-a"), pod_manifest("pod-b"))
    poll = {"url": f"{hook.base}/fetch", "intervalSeconds": 1, "timeoutSeconds": 60}
    await cluster.create_rule(
        rule_manifest("resume", [webhook_rule("slow", f"{hook.base}/start", poll=poll)])
    )

    async def polling() -> bool:
        status = await cluster.status("resume")
        tasks = [t for s in status.get("ruleStates", []) for t in s["webhookStatus"].get("taskStates", [])]
        return bool(tasks) and tasks[0]["taskId"] == "task-r" and len(hook.requests("GET", "/fetch")) >= 1

    await eventually(polling, what="the poll task running")
    await asyncio.to_thread(ptr_operator.restart)
    polls_before = len(hook.requests("GET", "/fetch"))
    restarted.set()

    await settled(cluster, "resume", passed={"pod-a", "pod-b"}, rejected=set())
    assert len(hook.requests("POST", "/start")) == 1  # resumed, not asked again
    gets = hook.requests("GET", "/fetch")
    assert len(gets) > polls_before and all(g.query == {"task-id": "task-r"} for g in gets)


# -- several rules, deletion ----------------------------------------------------------------------


async def test_two_rules_selecting_the_same_pods_judge_independently(cluster: Cluster) -> None:
    ready = {"app.custom/ready": "true"}
    await cluster.create_pods(
        pod_manifest("pod-a", available=True, extra_labels=ready),
        pod_manifest("pod-b", available=True, extra_labels=ready),
        pod_manifest("pod-c", available=True),
    )
    await cluster.create_rule(
        rule_manifest("labels", [{"name": "ready", "labelCheck": {"requires": {"matchLabels": ready}}}])
    )
    await cluster.create_rule(rule_manifest("budget", [budget_rule(maxUnavailableValue=1)]))
    await settled(cluster, "labels", passed={"pod-a", "pod-b"}, rejected={"pod-c"})
    await settled(cluster, "budget", passed={"pod-a"}, rejected={"pod-b", "pod-c"})
    await annotated(cluster, "labels", {"pod-a": PASSED, "pod-b": PASSED, "pod-c": HELD})
    await annotated(cluster, "budget", {"pod-a": PASSED, "pod-b": HELD, "pod-c": HELD})

    # what the lifecycle controller will conclude from both statuses
    rules = [PodTransitionRule.model_validate(await cluster.read_rule(name)) for name in ("labels", "budget")]
    gates = {}
    for name in ("pod-a", "pod-b", "pod-c"):
        pod = await cluster.core.read_namespaced_pod(name, cluster.namespace)
        view = PodView.from_pod(
            {"metadata": {"name": name, "namespace": cluster.namespace, "labels": pod.metadata.labels}},
            stage=Stage.PRE_CHECK,
        )
        gates[name] = gate_from_status(pod=view, rules=rules)
    assert [name for name, gate in gates.items() if gate.passed] == ["pod-a"]
    assert len(gates["pod-c"].reasons) == 2


async def test_deleting_the_rule_removes_its_annotations(cluster: Cluster) -> None:
    await cluster.create_pods(pod_manifest("pod-a"), pod_manifest("pod-b", stage=None))
    await cluster.create_rule(rule_manifest("gone", [budget_rule(maxUnavailableValue=1)]))
    await annotated(cluster, "gone", {"pod-a": PASSED, "pod-b": {"stage": "Unknown", "passed": True}})
    await cluster.delete_rule("gone")
    await annotated(cluster, "gone", {"pod-a": None, "pod-b": None})


async def test_pods_leaving_the_selector_lose_the_annotation_and_deleted_pods_leave_targets(
    cluster: Cluster,
) -> None:
    await cluster.create_pods(pod_manifest("pod-a"), pod_manifest("pod-b"))
    await cluster.create_rule(rule_manifest("moving", [budget_rule(maxUnavailableValue=2)]))
    await settled(cluster, "moving", passed={"pod-a", "pod-b"}, rejected=set())

    await cluster.label_pod("pod-b", {"app": "bar"})
    await annotated(cluster, "moving", {"pod-a": PASSED, "pod-b": None})
    await eventually(
        lambda: _targets(cluster, "moving", ["pod-a"]), timeout=REACTION_SECONDS, what="targets [pod-a]"
    )
    await cluster.core.delete_namespaced_pod("pod-a", cluster.namespace, grace_period_seconds=0)
    await eventually(lambda: _targets(cluster, "moving", []), what="targets empty after the deletion")


async def _targets(cluster: Cluster, ptr: str, expected: list[str]) -> bool:
    return bool((await cluster.status(ptr)).get("targets", []) == expected)


async def test_a_rule_deleted_while_the_operator_is_down_is_cleaned_up_after_start(
    cluster: Cluster, ptr_operator: Operator
) -> None:
    await cluster.create_pods(pod_manifest("pod-a"))
    await cluster.create_rule(rule_manifest("orphan", [budget_rule(maxUnavailableValue=1)]))
    await annotated(cluster, "orphan", {"pod-a": PASSED})
    await asyncio.to_thread(ptr_operator.stop)
    try:
        await cluster.delete_rule("orphan")
    finally:
        await asyncio.to_thread(ptr_operator.start)
    await annotated(cluster, "orphan", {"pod-a": None})


# -- the seed's manifests and admission -----------------------------------------------------------

SEED_SAMPLE = """\
apiVersion: apps.kusionstack.io/v1alpha1
kind: PodTransitionRule
metadata:
  name: podtransitionrule-sample
spec:
  rules:
  - availablePolicy:
      maxUnavailableValue: 50%
    name: maxUnavailable
  - stage: PreCheck  # stages are supported by PodOpsLifecycle. Defaults to PreCheck.
    labelCheck:
      requires:
        matchLabels:
          app.custom/ready: 'true'
    name: labelCheck
  - stage: PostCheck
    webhook:
      clientConfig:
        url: https://1.1.1.1:8089/post-stop
        caBundle: Cg==
        poll:
          url: http://1.1.1.1:8089/fetch-result
          rawQueryKey: task-id   # URL parameter key to carry trace ID when fetching result.
          intervalSeconds: 5
          timeoutSeconds: 60
      failurePolicy: Fail
      parameters:
      - key: podIP
        valueFrom:
          fieldRef:
            fieldPath: status.podIP
    name: webhookCheck
  selector:        # select pods in effect
    matchLabels:
      app: foo
"""

SEED_SPELLINGS = """\
apiVersion: apps.kusionstack.io/v1alpha1
kind: PodTransitionRule
metadata:
  name: seed-spellings
spec:
  selector:
    matchLabels:
      app: foo
  rules:
  - name: maxUnavailable
    availablePolicy:
      maxUnavailable:
        value: 50%
  - name: minAvailable
    availablePolicy:
      minAvailable:
        value: 1
  - name: labelCheck
    labelCheck:
      requires:
        matchLabels:
          app.custom/ready: 'true'
        matchExpressions:
        - key: app.custom/forbidden
          operator: DoesNotExist
"""


@pytest.mark.parametrize("manifest", [SEED_SAMPLE, SEED_SPELLINGS], ids=["sample", "spellings"])
async def test_the_seed_manifests_apply_unchanged_and_evaluate(cluster: Cluster, manifest: str) -> None:
    obj = yaml.safe_load(manifest)
    name = obj["metadata"]["name"]
    await cluster.create_pods(
        pod_manifest("pod-a", available=True, extra_labels={"app.custom/ready": "true"}),
        pod_manifest("pod-b", available=True, extra_labels={"app.custom/ready": "true"}),
    )
    created = await cluster.create_rule(obj)
    assert _kept(created["spec"], obj["spec"]), created["spec"]  # only defaults were added
    details = await settled(cluster, name, passed={"pod-a"}, rejected={"pod-b"})
    assert "maxUnavailable" in details["pod-a"]["passedRules"]
    assert "labelCheck" in details["pod-a"]["passedRules"]


def _kept(stored: Any, given: Any) -> bool:
    """Whether everything in ``given`` is in ``stored`` unchanged (defaults may be added)."""
    if isinstance(given, dict):
        return isinstance(stored, dict) and all(k in stored and _kept(stored[k], v) for k, v in given.items())
    if isinstance(given, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(given)
            and all(_kept(s, g) for s, g in zip(stored, given, strict=True))
        )
    return bool(stored == given)


def _rule(**fields: Any) -> dict[str, Any]:
    return {"name": "r", **fields}


LABELS = {"labelCheck": {"requires": {"matchLabels": {"a": "b"}}}}
BUDGET = {"availablePolicy": {"maxUnavailableValue": 1}}


def _spec(*rules: dict[str, Any], selector: bool = True) -> dict[str, Any]:
    spec: dict[str, Any] = {"rules": list(rules)}
    if selector:
        spec["selector"] = {"matchLabels": {"app": "foo"}}
    return spec


ADMISSION_CASES = [
    pytest.param(_spec(_rule(**LABELS), selector=False), ["spec.selector"], id="missing-selector"),
    pytest.param(_spec(dict(LABELS)), ["spec.rules[0].name", "required"], id="unnamed-rule"),
    pytest.param(_spec(_rule(name="", **LABELS)), ["spec.rules[0].name"], id="empty-rule-name"),
    pytest.param(
        _spec(_rule(**LABELS), _rule(**BUDGET)), ["spec.rules[1].name", "duplicate rule name"], id="duplicate"
    ),
    pytest.param(_spec(_rule()), ["spec.rules[0]", "exactly one of"], id="no-kind"),
    pytest.param(
        _spec(_rule(**LABELS, **BUDGET)), ["spec.rules[0]", "availablePolicy and labelCheck"], id="two-kinds"
    ),
    pytest.param(
        _spec(_rule(availablePolicy={"maxUnavailableValue": "150%"})),
        ["spec.rules[0].availablePolicy.maxUnavailableValue", "150%"],
        id="bad-percentage",
    ),
    pytest.param(
        _spec(_rule(availablePolicy={"maxUnavailableValue": "half"})),
        ["spec.rules[0].availablePolicy.maxUnavailableValue"],
        id="not-a-percentage",
    ),
    pytest.param(
        _spec(_rule(availablePolicy={"maxUnavailableValue": 0})),
        ["spec.rules[0].availablePolicy.maxUnavailableValue", "must not be 0"],
        id="max-unavailable-0",
    ),
    pytest.param(_spec(_rule(stage="PreFlight", **LABELS)), ["spec.rules[0].stage"], id="unknown-stage"),
    pytest.param(
        _spec(_rule(webhook={"clientConfig": {"url": "ftp://example.com/check"}})),
        ["spec.rules[0].webhook.clientConfig.url", "invalid URL"],
        id="invalid-url",
    ),
    pytest.param(
        _spec(
            _rule(webhook={"clientConfig": {"url": "https://example.com", "caBundle": "bm90IGEgY2VydA=="}})
        ),
        ["spec.rules[0].webhook.clientConfig.caBundle", "invalid caBundle"],
        id="invalid-ca-bundle",
    ),
]


@pytest.mark.parametrize(("spec", "fragments"), ADMISSION_CASES)
async def test_admission_rejects_with_the_field_named(
    cluster: Cluster, spec: dict[str, Any], fragments: list[str]
) -> None:
    manifest = {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "PodTransitionRule",
        "metadata": {"name": "bad"},
        "spec": copy.deepcopy(spec),
    }
    message = await admission_error(cluster, manifest)
    for fragment in fragments:
        assert fragment.lower() in message.lower(), message

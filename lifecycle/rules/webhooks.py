"""The webhook rule protocol, without I/O: requests, answers, poll tasks and what they mean for pods.

Sits between :mod:`lifecycle.rules.evaluating` (which hands over the pods still pending after
the budget and label rules) and :mod:`lifecycle.rules.calling` (the only place that talks HTTP).
Evaluation runs twice per reconcile: the first pass returns the calls it needs
(:class:`RequestCall`, :class:`PollCall`), the caller performs them, and the second pass gets
their outcomes (:class:`RequestOutcome`, :class:`PollOutcome`) and decides.

Wire format, as in the KusionStack seed: one ``POST clientConfig.url`` per rule and stage with
``{traceId, stage, ruleName, resources: [{apiVersion: v1, kind: Pod, name, parameters}]}``;
the answer ``{success, message, finishedNames, poll|async, taskId, traceId}``; with polling,
``GET <poll.url>?<rawQueryKey or task-id>=<taskId>`` every ``intervalSeconds`` answering
``{success, message, finished, finishedNames, stop}``, stopped after ``timeoutSeconds``.

Unlike Operating: ``failurePolicy`` is honoured (``Ignore`` passes pods when the server cannot
be reached or answers garbage, ``Fail`` rejects them with the error); poll tasks live in the
PTR status (:class:`~lifecycle.rules.models.TaskState`), not in memory, so a restarted operator
resumes polling; and a poll is due when ``intervalSeconds`` passed since the last one, checked
on each reconcile, instead of by a background ticker.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final, Literal
from urllib.parse import quote

from cryptography import x509

from lifecycle.rules.models import (
    ASYNC_POLL_QUERY_KEY,
    DEFAULT_POLL_INTERVAL_SECONDS,
    DEFAULT_POLL_QUERY_KEY,
    FailurePolicy,
    Parameter,
    Poll,
    Rule,
    Stage,
    TaskState,
    WebhookStatus,
)
from lifecycle.rules.subjects import PodView

#: Per-HTTP-request timeout, as Operating's client.
REQUEST_TIMEOUT_SECONDS: Final = 30.0
#: Look again this soon after a webhook rejected pods or failed.
RETRY_SECONDS: Final = 5.0
#: Finished tasks stay in status this long (by their last poll), for people reading it.
HISTORY_TTL: Final = timedelta(minutes=10)
#: At most this many finished tasks per rule are kept, newest last.
HISTORY_LIMIT: Final = 20
#: Bodies quoted in error messages are cut to this many characters.
BODY_SNIPPET: Final = 256

POD_API_VERSION: Final = "v1"
POD_KIND: Final = "Pod"

FailureKind = Literal["transport", "status", "decode", "protocol"]


# -- parameters -----------------------------------------------------------------------------------


class FieldPathError(ValueError):
    """A ``fieldRef.fieldPath`` that cannot be parsed."""


PathPart = str | int

_FIRST = re.compile(r"[A-Za-z0-9_\-]+")
_NEXT = re.compile(r"\.([A-Za-z0-9_\-]+)|\[(\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")


def parse_field_path(path: str) -> tuple[PathPart, ...]:
    """``metadata.labels['a/b']`` -> ``("metadata", "labels", "a/b")``; ``[0]`` becomes an int index."""
    first = _FIRST.match(path)
    if first is None:
        raise FieldPathError(f"cannot parse field path {path!r}: it must start with a field name")
    parts: list[PathPart] = [first.group(0)]
    pos = first.end()
    while pos < len(path):
        step = _NEXT.match(path, pos)
        if step is None:
            raise FieldPathError(f"cannot parse field path {path!r} at position {pos}")
        name, index, single, double = step.groups()
        if name is not None:
            parts.append(name)
        elif index is not None:
            parts.append(int(index))
        else:
            parts.append(single if single is not None else double)
        pos = step.end()
    return tuple(parts)


def _format_map(values: Mapping[str, str]) -> str:
    # the downward API's format for whole label/annotation maps: sorted key="value" lines
    return "\n".join(f"{key}={json.dumps(values[key], ensure_ascii=False)}" for key in sorted(values))


def _walk(document: Any, parts: Sequence[PathPart]) -> Any:
    for part in parts:
        if isinstance(part, int):
            if not isinstance(document, list) or part >= len(document):
                return None
            document = document[part]
        else:
            if not isinstance(document, Mapping):
                return None
            document = document.get(part)
    return document


def _render(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def extract_parameter(*, parameter: Parameter, pod: PodView) -> str:
    """A parameter's value for one pod: ``value`` when non-empty, else the pod's field (missing -> "")."""
    if parameter.value:
        return parameter.value
    if parameter.value_from is None:
        return ""
    parts = parse_field_path(parameter.value_from.field_ref.field_path)
    if parts == ("metadata", "labels"):
        return _format_map(pod.labels)
    if parts == ("metadata", "annotations"):
        return _format_map(pod.annotations)
    if len(parts) == 3 and parts[0] == "metadata" and parts[1] in ("labels", "annotations"):
        source = pod.labels if parts[1] == "labels" else pod.annotations
        return source.get(str(parts[2]), "")
    if parts == ("metadata", "name"):
        return pod.name
    if parts == ("metadata", "namespace"):
        return pod.namespace
    return _render(_walk(pod.manifest, parts))


def build_request(*, rule: Rule, stage: Stage, pods: Sequence[PodView], trace_id: str) -> dict[str, Any]:
    """The JSON body of the first call for ``pods`` (sorted by name), in the seed's shape."""
    if rule.webhook is None:
        raise ValueError(f"rule {rule.name!r} is not a webhook rule")
    parameters = rule.webhook.parameters
    return {
        "traceId": trace_id,
        "stage": stage.value,
        "ruleName": rule.name,
        "resources": [
            {
                "apiVersion": POD_API_VERSION,
                "kind": POD_KIND,
                "name": pod.name,
                "parameters": {
                    param.key: extract_parameter(parameter=param, pod=pod) for param in parameters
                },
            }
            for pod in sorted(pods, key=lambda p: p.name)
        ],
    }


# -- answers --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class WebhookFailure:
    """No usable answer: unreachable (transport), non-2xx (status), unparsable (decode) or not followable."""

    kind: FailureKind
    message: str


@dataclass(frozen=True, kw_only=True)
class WebhookResponse:
    """The answer to the first call."""

    success: bool
    message: str = ""
    finished_names: tuple[str, ...] = ()
    poll: bool = False
    async_: bool = False
    trace_id: str = ""
    task_id: str = ""

    def wants_polling(self) -> bool:
        return self.success and (self.poll or self.async_)

    def poll_task_id(self) -> str:
        """The id to poll with: ``taskId``, else (for the deprecated async form) ``traceId``."""
        return self.task_id or self.trace_id

    def query_key(self, raw_query_key: str | None) -> str:
        """The query parameter for polls: the rule's ``rawQueryKey``, else by answer form."""
        if raw_query_key:
            return raw_query_key
        return ASYNC_POLL_QUERY_KEY if self.async_ and not self.poll else DEFAULT_POLL_QUERY_KEY


@dataclass(frozen=True, kw_only=True)
class PollResponse:
    """The answer to one poll."""

    success: bool
    message: str = ""
    finished: bool = False
    finished_names: tuple[str, ...] = ()
    stop: bool = False


class _Garbage(Exception):
    pass


def _snippet(body: bytes | str) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    return text if len(text) <= BODY_SNIPPET else text[:BODY_SNIPPET] + "..."


def _decode_object(body: bytes | str) -> Mapping[str, Any]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError) as error:
        raise _Garbage(f"cannot decode response as JSON ({error}), body: {_snippet(body)}") from error
    if not isinstance(document, dict):
        raise _Garbage(f"response is not a JSON object, body: {_snippet(body)}")
    return document


def _flag(document: Mapping[str, Any], key: str, *, required: bool = False) -> bool:
    value = document.get(key)
    if value is None:
        if required:
            raise _Garbage(f"response has no boolean {key!r}")
        return False
    if not isinstance(value, bool):
        raise _Garbage(f"response field {key!r} must be a boolean, got {value!r}")
    return value


def _text(document: Mapping[str, Any], key: str) -> str:
    value = document.get(key)
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise _Garbage(f"response field {key!r} must be a string, got {value!r}")
    return str(value)


def _names(document: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = document.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise _Garbage(f"response field {key!r} must be a list of pod names, got {value!r}")
    return tuple(value)


def parse_response(body: bytes | str) -> WebhookResponse | WebhookFailure:
    """The first call's answer, or a ``decode`` failure saying what is wrong with it."""
    try:
        document = _decode_object(body)
        response = WebhookResponse(
            success=_flag(document, "success", required=True),
            message=_text(document, "message"),
            finished_names=_names(document, "finishedNames"),
            poll=_flag(document, "poll"),
            async_=_flag(document, "async"),
            trace_id=_text(document, "traceId"),
            task_id=_text(document, "taskId"),
        )
    except _Garbage as garbage:
        return WebhookFailure(kind="decode", message=str(garbage))
    if response.wants_polling() and not response.poll_task_id():
        return WebhookFailure(kind="decode", message="response asks to poll but carries no taskId")
    return response


def parse_poll_response(body: bytes | str) -> PollResponse | WebhookFailure:
    """One poll's answer, or a ``decode`` failure saying what is wrong with it."""
    try:
        document = _decode_object(body)
        return PollResponse(
            success=_flag(document, "success", required=True),
            message=_text(document, "message"),
            finished=_flag(document, "finished"),
            finished_names=_names(document, "finishedNames"),
            stop=_flag(document, "stop"),
        )
    except _Garbage as garbage:
        return WebhookFailure(kind="decode", message=str(garbage))


def status_failure(*, status: int, body: bytes | str) -> WebhookFailure:
    """A non-2xx answer, in Operating's wording."""
    return WebhookFailure(
        kind="status", message=f"failed by response status code: {status}, body: {_snippet(body)}"
    )


def decode_ca_bundle(ca_bundle: str | None) -> str | None:
    """The PEM text of a ``caBundle`` (base64 of PEM certificates), or None when it holds none.

    Empty, and blank after decoding (the seed's ``Cg==`` is a newline), mean "system roots".
    ``ValueError`` says what is wrong otherwise.
    """
    if not ca_bundle:
        return None
    try:
        raw = base64.b64decode(ca_bundle, validate=True)
    except (binascii.Error, ValueError) as error:
        raise ValueError(f"not valid base64 ({error})") from error
    if not raw.strip():
        return None
    try:
        x509.load_pem_x509_certificates(raw)
    except ValueError as error:
        raise ValueError(f"must be base64 of PEM certificates, but {error}") from error
    return raw.decode("ascii", "replace")


def build_poll_url(*, url: str, query_key: str, task_id: str) -> str:
    """``<url>?<key>=<taskId>``, appended with ``&`` when the URL already has a query."""
    fragment = ""
    if "#" in url:
        url, fragment = url.split("#", 1)
        fragment = "#" + fragment
    if "?" not in url:
        separator = "?"
    elif url.endswith(("?", "&")):
        separator = ""
    else:
        separator = "&"
    return f"{url}{separator}{quote(query_key, safe='-_.~')}={quote(task_id, safe='-_.~')}{fragment}"


# -- poll tasks -----------------------------------------------------------------------------------


def next_poll_at(*, task: TaskState, interval_seconds: int) -> datetime:
    """When the task is due for its next poll: ``intervalSeconds`` after the last (or its start)."""
    return (task.last_time or task.begin_time) + timedelta(seconds=interval_seconds)


def advance_task(
    task: TaskState,
    result: PollResponse | WebhookFailure | None,
    *,
    now: datetime,
    poll: Poll | None,
    failure_policy: FailurePolicy,
) -> TaskState:
    """One step of a poll task: apply a poll's answer (or none, when not due), then the deadline.

    ``finishedNames`` approve those pods; ``success`` and ``finished`` approve the rest;
    ``stop`` stops the task. A failed poll keeps the task polling under ``Fail`` (the error
    becomes the task message) and approves every waiting pod under ``Ignore``. Past
    ``timeoutSeconds`` from the start, a task that still has waiting pods stops with
    ``Polling Timeout. <last message>``. Stopped and finished tasks do not change.
    """
    if task.stopped or not task.processing:
        return task
    processing = list(task.processing)
    approved = set(task.approved)
    message = task.message
    stopped = False
    last_time = task.last_time
    if isinstance(result, PollResponse):
        last_time = now
        message = result.message
        approved |= set(result.finished_names) & set(processing)
        if result.success and result.finished:
            approved |= set(processing)
        elif result.stop:
            stopped = True
    elif isinstance(result, WebhookFailure):
        last_time = now
        if failure_policy is FailurePolicy.IGNORE:
            approved |= set(processing)
            message = f"polling failed, passed by failurePolicy Ignore: {result.message}"
        else:
            message = f"polling failed: {result.message}"
    processing = [name for name in processing if name not in approved]
    if processing and not stopped:
        if poll is None:
            stopped = True
            message = "the rule has no clientConfig.poll any more"
        elif now >= task.begin_time + timedelta(seconds=poll.timeout_seconds):
            stopped = True
            message = f"Polling Timeout. {message}".rstrip()
    return task.model_copy(
        update={
            "processing": tuple(processing),
            "approved": tuple(sorted(approved)),
            "message": message,
            "stopped": stopped,
            "last_time": last_time,
        }
    )


# -- calls and their outcomes ---------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class RequestCall:
    """POST the rule's webhook for ``pods``; the caller picks the trace id."""

    rule: Rule
    stage: Stage
    pods: tuple[PodView, ...]

    @property
    def rule_name(self) -> str:
        return self.rule.name


@dataclass(frozen=True, kw_only=True)
class PollCall:
    """GET ``url`` for one running task."""

    rule_name: str
    task_id: str
    url: str
    ca_bundle: str | None


WebhookCall = RequestCall | PollCall


@dataclass(frozen=True, kw_only=True)
class RequestOutcome:
    rule_name: str
    trace_id: str
    pods: tuple[str, ...]
    response: WebhookResponse | WebhookFailure


@dataclass(frozen=True, kw_only=True)
class PollOutcome:
    rule_name: str
    task_id: str
    response: PollResponse | WebhookFailure


WebhookResult = RequestOutcome | PollOutcome


@dataclass(frozen=True, kw_only=True)
class WebhookRuleOutcome:
    """What one webhook rule decided for its pending pods, and what it still needs."""

    passed: frozenset[str]
    rejected: Mapping[str, str]
    status: WebhookStatus
    calls: tuple[WebhookCall, ...] = ()
    retry_after: float | None = None
    warnings: tuple[str, ...] = field(default=())


def _seconds_until(moment: datetime, now: datetime) -> float:
    return max(0.0, (moment - now).total_seconds())


def evaluate_webhook_rule(
    *,
    rule: Rule,
    key: str,
    stage: Stage,
    pending: Sequence[PodView],
    approved_before: Set[str],
    previous: WebhookStatus | None,
    results: Sequence[WebhookResult],
    now: datetime,
) -> WebhookRuleOutcome:
    """Decide ``pending`` pods for one webhook rule (``key`` = ``<ns>/<ptr>/<rule>`` for messages).

    Pods in ``approved_before`` pass without a call. Pods tracked by a task of ``previous``
    follow the task (stepped with a matching :class:`PollOutcome`, or polled when due).
    The rest go to one new request; with a matching :class:`RequestOutcome` its answer is
    applied, otherwise a :class:`RequestCall` is returned and they wait.
    """
    if rule.webhook is None:
        raise ValueError(f"rule {rule.name!r} is not a webhook rule")
    webhook = rule.webhook
    poll = webhook.client_config.poll
    interval = poll.interval_seconds if poll is not None else DEFAULT_POLL_INTERVAL_SECONDS
    by_name = {pod.name: pod for pod in pending}
    todo = set(by_name)
    passed = todo & set(approved_before)
    todo -= passed
    rejected: dict[str, str] = {}
    calls: list[WebhookCall] = []
    waits: list[float] = []
    warnings: list[str] = []
    previous = previous or WebhookStatus()
    history = [task for task in previous.history if now - (task.last_time or task.begin_time) <= HISTORY_TTL]
    live: list[TaskState] = []
    settled: set[str] = set()
    polled = {
        result.task_id: result.response
        for result in results
        if isinstance(result, PollOutcome) and result.rule_name == rule.name
    }
    requested = [r for r in results if isinstance(r, RequestOutcome) and r.rule_name == rule.name]

    for task in previous.task_states:
        if not set(task.processing) & todo:
            # nobody it could still decide is waiting here any more
            history.append(task)
            continue
        task = advance_task(
            task, polled.get(task.task_id), now=now, poll=poll, failure_policy=webhook.failure_policy
        )
        mine = todo & (set(task.processing) | set(task.approved))
        passed |= mine & set(task.approved)
        waiting = sorted(mine - set(task.approved))
        settled |= mine
        if task.stopped or not task.processing:
            history.append(task)
            for name in waiting:
                rejected[name] = (
                    f"Not approved by webhook {key}, polling task {task.task_id} stopped: {task.message}"
                )
            if waiting:
                # they get a fresh request on the next pass, not in a hot loop
                waits.append(float(interval))
            continue
        live.append(task)
        for name in waiting:
            rejected[name] = f"Polling task {key} is running, taskId {task.task_id}, msg: {task.message}"
        due = next_poll_at(task=task, interval_seconds=interval)
        if due <= now and poll is not None and task.task_id not in polled:
            calls.append(
                PollCall(
                    rule_name=rule.name,
                    task_id=task.task_id,
                    url=build_poll_url(url=poll.url, query_key=task.query_key, task_id=task.task_id),
                    ca_bundle=webhook.poll_ca_bundle(),
                )
            )
            waits.append(float(interval))
        else:
            deadline = task.begin_time + timedelta(seconds=poll.timeout_seconds if poll else 0)
            waits.append(_seconds_until(min(due, deadline), now))

    untracked = sorted(todo - passed - settled)
    unanswered = untracked
    if untracked and requested:
        outcome = requested[-1]
        sent = set(outcome.pods)
        covered = [name for name in untracked if name in sent]
        unanswered = [name for name in untracked if name not in sent]
        response = outcome.response
        if isinstance(response, WebhookResponse) and response.wants_polling() and poll is None:
            response = WebhookFailure(
                kind="protocol",
                message=f"Fail to get {key} polling config, null polling config in rule {key}",
            )
        if isinstance(response, WebhookFailure):
            if webhook.failure_policy is FailurePolicy.IGNORE:
                passed |= set(covered)
                warnings.append(
                    f"Webhook request {key} failed, pods passed by failurePolicy Ignore: "
                    f"{response.message}, traceId {outcome.trace_id}"
                )
            else:
                for name in covered:
                    rejected[name] = (
                        f"Fail to do webhook request {key}, {response.message}, traceId {outcome.trace_id}"
                    )
                waits.append(RETRY_SECONDS)
        elif not response.success:
            finished = set(response.finished_names)
            for name in covered:
                if name in finished:
                    passed.add(name)
                else:
                    rejected[name] = (
                        f"Webhook check {key} rejected, traceId {outcome.trace_id}, "
                        f"taskId {response.task_id}, msg: {response.message}"
                    )
            waits.append(RETRY_SECONDS)
        elif not response.wants_polling():
            passed |= set(covered)
        else:
            assert poll is not None  # a poll answer without poll config became a failure above
            finished = set(response.finished_names)
            task = TaskState(
                task_id=response.poll_task_id(),
                trace_id=outcome.trace_id,
                query_key=response.query_key(poll.raw_query_key),
                processing=tuple(name for name in covered if name not in finished),
                approved=tuple(name for name in covered if name in finished),
                begin_time=now,
                message=response.message,
            )
            passed |= set(task.approved)
            if task.processing:
                live.append(task)
                for name in task.processing:
                    rejected[name] = (
                        f"Polling task {key} initialized, will polling by taskId {task.task_id}, "
                        f"msg: {task.message}"
                    )
                waits.append(float(interval))
            else:
                history.append(task)
    if unanswered:
        calls.append(RequestCall(rule=rule, stage=stage, pods=tuple(by_name[name] for name in unanswered)))
        for name in unanswered:
            rejected[name] = f"Waiting for webhook {key} to answer"

    return WebhookRuleOutcome(
        passed=frozenset(passed),
        rejected=rejected,
        status=WebhookStatus(task_states=tuple(live), history=tuple(history[-HISTORY_LIMIT:])),
        calls=tuple(calls),
        retry_after=min(waits) if waits else None,
        warnings=tuple(warnings),
    )

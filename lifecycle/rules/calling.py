"""The only I/O of PodTransitionRule evaluation: HTTP calls to rule webhooks, with aiohttp.

Sits between the PTR controller and the pure core: :func:`evaluate_stage_with_calls` runs
:func:`~lifecycle.rules.evaluating.evaluate_stage`, performs the calls it asks for
(:func:`perform_calls`), and evaluates again with their outcomes. Every failure comes back as
a typed :class:`~lifecycle.rules.webhooks.WebhookFailure` (never an exception), so the rule's
``failurePolicy`` decides what it means.

TLS: a ``caBundle`` replaces the system roots and verifies the server's certificate (Operating
put it in the client-CA pool, where it verified nothing); without one the system roots are used.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar

import aiohttp

from lifecycle.rules.evaluating import StageVerdicts, evaluate_stage
from lifecycle.rules.models import PodTransitionRule, PodTransitionRuleStatus, Stage
from lifecycle.rules.subjects import PodView
from lifecycle.rules.webhooks import (
    REQUEST_TIMEOUT_SECONDS,
    PollCall,
    PollOutcome,
    PollResponse,
    RequestOutcome,
    WebhookCall,
    WebhookFailure,
    WebhookResponse,
    WebhookResult,
    build_request,
    decode_ca_bundle,
    parse_poll_response,
    parse_response,
    status_failure,
)

#: Answers larger than this are refused as garbage.
MAX_BODY_BYTES: Final = 1 << 20
#: Calls in flight at once, per :func:`perform_calls`.
CONCURRENCY: Final = 16


def new_trace_id() -> str:
    return str(uuid.uuid4())


@functools.lru_cache(maxsize=64)
def ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying client context: the bundle's CAs only, or the system roots without one.

    ``ValueError`` when the bundle is not base64 of PEM certificates.
    """
    pem = decode_ca_bundle(ca_bundle)
    if pem is None:
        return ssl.create_default_context()
    return ssl.create_default_context(cadata=pem)


class _TooLarge(Exception):
    pass


async def _exchange(
    *,
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    body: Mapping[str, Any] | None,
    ca_bundle: str | None,
    timeout_seconds: float,
) -> tuple[int, bytes] | WebhookFailure:
    try:
        context = ssl_context(ca_bundle)
    except ValueError as error:
        return WebhookFailure(kind="transport", message=f"invalid caBundle: {error}")
    try:
        async with session.request(
            method,
            url,
            json=body,
            ssl=context,
            timeout=aiohttp.ClientTimeout(total=timeout_seconds),
        ) as response:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.content.iter_chunked(64 * 1024):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise _TooLarge
                chunks.append(chunk)
            return response.status, b"".join(chunks)
    except _TooLarge:
        return WebhookFailure(kind="decode", message=f"response larger than {MAX_BODY_BYTES} bytes")
    except TimeoutError:
        return WebhookFailure(
            kind="transport", message=f"{method} {url}: no answer within {timeout_seconds:g}s"
        )
    except (aiohttp.ClientError, OSError, ValueError) as error:
        return WebhookFailure(kind="transport", message=f"{method} {url}: {type(error).__name__}: {error}")


async def post_webhook(
    *,
    session: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    ca_bundle: str | None,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> WebhookResponse | WebhookFailure:
    """POST the first call and parse its answer."""
    answer = await _exchange(
        session=session,
        method="POST",
        url=url,
        body=body,
        ca_bundle=ca_bundle,
        timeout_seconds=timeout_seconds,
    )
    return _decode(answer, parse_response)


async def fetch_poll(
    *,
    session: aiohttp.ClientSession,
    url: str,
    ca_bundle: str | None,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> PollResponse | WebhookFailure:
    """GET one poll and parse its answer."""
    answer = await _exchange(
        session=session,
        method="GET",
        url=url,
        body=None,
        ca_bundle=ca_bundle,
        timeout_seconds=timeout_seconds,
    )
    return _decode(answer, parse_poll_response)


_T = TypeVar("_T")


def _decode(
    answer: tuple[int, bytes] | WebhookFailure, parse: Callable[[bytes], _T | WebhookFailure]
) -> _T | WebhookFailure:
    """A transport failure as is, a non-2xx status as a failure, else the parsed body."""
    if isinstance(answer, WebhookFailure):
        return answer
    status, data = answer
    if not 200 <= status < 300:
        return status_failure(status=status, body=data)
    return parse(data)


async def _perform(
    call: WebhookCall,
    *,
    session: aiohttp.ClientSession,
    trace_ids: Callable[[], str],
    timeout_seconds: float,
) -> WebhookResult:
    if isinstance(call, PollCall):
        polled = await fetch_poll(
            session=session, url=call.url, ca_bundle=call.ca_bundle, timeout_seconds=timeout_seconds
        )
        return PollOutcome(rule_name=call.rule_name, task_id=call.task_id, response=polled)
    trace_id = trace_ids()
    names = tuple(pod.name for pod in call.pods)
    webhook = call.rule.webhook
    if webhook is None:
        raise ValueError(f"rule {call.rule_name!r} is not a webhook rule")
    response: WebhookResponse | WebhookFailure
    try:
        body = build_request(rule=call.rule, stage=call.stage, pods=call.pods, trace_id=trace_id)
    except ValueError as error:
        response = WebhookFailure(kind="protocol", message=f"cannot build the request: {error}")
    else:
        response = await post_webhook(
            session=session,
            url=webhook.client_config.url,
            body=body,
            ca_bundle=webhook.client_config.ca_bundle,
            timeout_seconds=timeout_seconds,
        )
    return RequestOutcome(rule_name=call.rule_name, trace_id=trace_id, pods=names, response=response)


async def perform_calls(
    *,
    calls: Sequence[WebhookCall],
    session: aiohttp.ClientSession,
    trace_ids: Callable[[], str] = new_trace_id,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
    concurrency: int = CONCURRENCY,
) -> tuple[WebhookResult, ...]:
    """Perform the calls concurrently (at most ``concurrency`` at once), outcomes in call order."""
    gate = asyncio.Semaphore(concurrency)

    async def bounded(call: WebhookCall) -> WebhookResult:
        async with gate:
            return await _perform(call, session=session, trace_ids=trace_ids, timeout_seconds=timeout_seconds)

    return tuple(await asyncio.gather(*(bounded(call) for call in calls)))


async def evaluate_stage_with_calls(
    *,
    session: aiohttp.ClientSession,
    rule_obj: PodTransitionRule,
    stage: Stage,
    selected_pods: Sequence[PodView],
    subjects: Sequence[PodView],
    previous_status: PodTransitionRuleStatus | None,
    now: datetime,
    trace_ids: Callable[[], str] = new_trace_id,
    timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
) -> StageVerdicts:
    """Evaluate, make the webhook calls that needs, and evaluate again with their outcomes."""
    first = evaluate_stage(
        rule_obj=rule_obj,
        stage=stage,
        selected_pods=selected_pods,
        subjects=subjects,
        previous_status=previous_status,
        now=now,
    )
    if not first.calls:
        return first
    results = await perform_calls(
        calls=first.calls, session=session, trace_ids=trace_ids, timeout_seconds=timeout_seconds
    )
    return evaluate_stage(
        rule_obj=rule_obj,
        stage=stage,
        selected_pods=selected_pods,
        subjects=subjects,
        previous_status=previous_status,
        webhook_results=results,
        now=now,
    )

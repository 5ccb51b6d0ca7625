"""Webhook I/O against real aiohttp servers on 127.0.0.1: plain HTTP, HTTPS with our own CA, failures."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from lifecycle.rules.calling import evaluate_stage_with_calls, fetch_poll, post_webhook
from lifecycle.rules.evaluating import build_status
from lifecycle.rules.webhooks import PollResponse, WebhookFailure, WebhookResponse

from .builders import NOW, PRE, pod, ptr, webhook
from .tls import Issued, make_ca, make_server_cert


@dataclass
class Hook:
    """A webhook server that records what it receives."""

    base: str
    received: list[tuple[str, str, dict[str, str], Any]] = field(default_factory=list)


def _app(
    hook_received: list[tuple[str, str, dict[str, str], Any]], release: asyncio.Event
) -> web.Application:
    polls = {"count": 0}

    async def record(request: web.Request) -> None:
        body = await request.json() if request.can_read_body else None
        hook_received.append((request.method, request.path_qs, dict(request.headers), body))

    async def check(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"success": True, "message": "ok"})

    async def reject(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"success": False, "message": "no", "finishedNames": ["pod-a"]})

    async def start_poll(request: web.Request) -> web.Response:
        await record(request)
        return web.json_response({"success": True, "poll": True, "taskId": "t-1", "message": "accepted"})

    async def fetch(request: web.Request) -> web.Response:
        await record(request)
        polls["count"] += 1
        names = ["pod-a", "pod-b", "pod-c"][: polls["count"]]
        return web.json_response({"success": True, "finished": len(names) == 3, "finishedNames": names})

    async def error(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(status=500, text="boom")

    async def garbage(request: web.Request) -> web.Response:
        await record(request)
        return web.Response(text="<html>not json</html>")

    async def hang(request: web.Request) -> web.Response:
        await asyncio.wait_for(release.wait(), timeout=10)
        return web.json_response({"success": True})

    app = web.Application()
    app.router.add_post("/check", check)
    app.router.add_post("/reject", reject)
    app.router.add_post("/start-poll", start_poll)
    app.router.add_get("/fetch", fetch)
    app.router.add_route("*", "/error", error)
    app.router.add_post("/garbage", garbage)
    app.router.add_post("/hang", hang)
    return app


Serve = Callable[..., Awaitable[Hook]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    runners: list[web.AppRunner] = []
    release = asyncio.Event()

    async def start(*, tls: ssl.SSLContext | None = None) -> Hook:
        received: list[tuple[str, str, dict[str, str], Any]] = []
        runner = web.AppRunner(_app(received, release), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        return Hook(base=f"{'https' if tls else 'http'}://127.0.0.1:{port}", received=received)

    yield start
    release.set()
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture(scope="module")
def ca() -> Issued:
    return make_ca("test-webhook-ca")


@pytest.fixture
def server_tls(ca: Issued, tmp_path: Path) -> ssl.SSLContext:
    cert_path, key_path = make_server_cert(ca).write(tmp_path, "server")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context


BODY = {"traceId": "t", "stage": "PreCheck", "ruleName": "hook", "resources": []}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        pytest.param("/check", WebhookResponse(success=True, message="ok"), id="success"),
        pytest.param(
            "/reject", WebhookResponse(success=False, message="no", finished_names=("pod-a",)), id="rejection"
        ),
        pytest.param(
            "/error",
            WebhookFailure(kind="status", message="failed by response status code: 500, body: boom"),
            id="http-500",
        ),
        pytest.param(
            "/missing",
            WebhookFailure(
                kind="status", message="failed by response status code: 404, body: 404: Not Found"
            ),
            id="http-404",
        ),
    ],
)
async def test_post_over_plain_http(
    serve: Serve, session: aiohttp.ClientSession, path: str, expected: WebhookResponse | WebhookFailure
) -> None:
    hook = await serve()

    result = await post_webhook(session=session, url=hook.base + path, body=BODY, ca_bundle=None)

    assert result == expected


async def test_post_sends_json(serve: Serve, session: aiohttp.ClientSession) -> None:
    hook = await serve()
    await post_webhook(session=session, url=f"{hook.base}/check", body=BODY, ca_bundle="Cg==")
    ((method, path, headers, body),) = hook.received
    assert (method, path, body) == ("POST", "/check", BODY)
    assert headers["Content-Type"] == "application/json"


async def test_garbage_answer_is_a_decode_failure(serve: Serve, session: aiohttp.ClientSession) -> None:
    hook = await serve()
    result = await post_webhook(session=session, url=f"{hook.base}/garbage", body=BODY, ca_bundle=None)
    assert isinstance(result, WebhookFailure)
    assert result.kind == "decode"


async def test_unreachable_server_is_a_transport_failure(session: aiohttp.ClientSession) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await post_webhook(
        session=session, url=f"http://127.0.0.1:{port}/check", body=BODY, ca_bundle=None
    )
    assert isinstance(result, WebhookFailure)
    assert result.kind == "transport"


async def test_slow_server_times_out(serve: Serve, session: aiohttp.ClientSession) -> None:
    hook = await serve()
    result = await post_webhook(
        session=session, url=f"{hook.base}/hang", body=BODY, ca_bundle=None, timeout_seconds=0.2
    )
    assert result == WebhookFailure(kind="transport", message=f"POST {hook.base}/hang: no answer within 0.2s")


async def test_poll_get(serve: Serve, session: aiohttp.ClientSession) -> None:
    hook = await serve()
    result = await fetch_poll(session=session, url=f"{hook.base}/fetch?task-id=t-1", ca_bundle=None)
    assert result == PollResponse(success=True, finished_names=("pod-a",))
    assert hook.received[0][:2] == ("GET", "/fetch?task-id=t-1")


async def test_https_with_the_right_ca(
    serve: Serve, session: aiohttp.ClientSession, server_tls: ssl.SSLContext, ca: Issued
) -> None:
    hook = await serve(tls=server_tls)

    result = await post_webhook(
        session=session, url=f"{hook.base}/check", body=BODY, ca_bundle=ca.ca_bundle()
    )

    assert result == WebhookResponse(success=True, message="ok")


@pytest.mark.parametrize(
    "bundle",
    [
        pytest.param(lambda: make_ca("someone-else").ca_bundle(), id="wrong-ca"),
        pytest.param(lambda: None, id="system-roots"),
        pytest.param(lambda: "Cg==", id="seed-empty-bundle"),
    ],
)
async def test_https_refuses_servers_the_bundle_does_not_vouch_for(
    serve: Serve, session: aiohttp.ClientSession, server_tls: ssl.SSLContext, bundle: Callable[[], str | None]
) -> None:
    hook = await serve(tls=server_tls)

    result = await post_webhook(session=session, url=f"{hook.base}/check", body=BODY, ca_bundle=bundle())

    assert isinstance(result, WebhookFailure)
    assert result.kind == "transport"
    assert "certificate" in result.message.lower()
    assert hook.received == []


async def test_invalid_ca_bundle_is_a_transport_failure(session: aiohttp.ClientSession) -> None:
    result = await post_webhook(session=session, url="https://127.0.0.1:1/", body=BODY, ca_bundle="!!")
    assert isinstance(result, WebhookFailure)
    assert result.message.startswith("invalid caBundle: not valid base64")


async def test_reconciles_with_polling_over_https(
    serve: Serve, session: aiohttp.ClientSession, server_tls: ssl.SSLContext, ca: Issued
) -> None:
    hook = await serve(tls=server_tls)
    rule = webhook(
        url=f"{hook.base}/start-poll",
        poll={"url": f"{hook.base}/fetch", "intervalSeconds": 5, "timeoutSeconds": 60},
        parameters=[{"key": "name", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    )
    rule["webhook"]["clientConfig"]["caBundle"] = ca.ca_bundle()
    rule_obj = ptr(rule)
    pods = [pod("pod-a"), pod("pod-b"), pod("pod-c")]
    previous = None
    passed = []
    for at in (0, 5, 10, 15):
        verdicts = await evaluate_stage_with_calls(
            session=session,
            rule_obj=rule_obj,
            stage=PRE,
            selected_pods=pods,
            subjects=pods,
            previous_status=previous,
            now=NOW + timedelta(seconds=at),
            trace_ids=lambda: "trace-1",
        )
        previous = build_status(rule_obj=rule_obj, selected_pods=pods, stages=[verdicts], now=NOW)
        passed.append(sorted(verdicts.verdict.passed))

    assert passed == [[], ["pod-a"], ["pod-a", "pod-b"], ["pod-a", "pod-b", "pod-c"]]
    first = hook.received[0]
    assert first[3] == {
        "traceId": "trace-1",
        "stage": "PreCheck",
        "ruleName": "hook",
        "resources": [
            {"apiVersion": "v1", "kind": "Pod", "name": name, "parameters": {"name": name}}
            for name in ("pod-a", "pod-b", "pod-c")
        ],
    }
    assert [path for method, path, _, _ in hook.received if method == "GET"] == ["/fetch?task-id=t-1"] * 3

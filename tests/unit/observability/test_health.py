"""The health server on a real port: liveness, readiness with what is missing, metrics; log formats."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import kopf
import pytest

from rollouts.apicalls import ApiCalls, CallKey
from rollouts.operator import health, logs
from rollouts.operator.certificates import generate_pem
from rollouts.operator.running import StartupError

PODS = health.Resource(group="", resource="pods")
JOBS = health.Resource(group="batch", resource="jobs")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def webhook_port(tmp_path: Path) -> AsyncIterator[int]:
    """A TLS server on 127.0.0.1 standing in for kopf's webhook server."""
    _, cert, key = generate_pem(names=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0, ssl=context)
    yield int(server.sockets[0].getsockname()[1])
    server.close()
    await server.wait_closed()


async def get(port: int, path: str) -> tuple[int, str, str]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}{path}") as answer:
        return answer.status, await answer.text(), answer.headers.get("Content-Type", "")


async def test_readiness_names_what_is_missing_until_everything_is_there(webhook_port: int) -> None:
    calls = ApiCalls()
    calls.record(CallKey(verb="list", group="", resource="pods", code="200"))  # an earlier run's listing
    started = asyncio.Event()
    readiness = health.Readiness(
        kopf_ready=started, resources=[PODS, JOBS], webhook=("127.0.0.1", webhook_port), calls=calls
    )
    port = free_port()
    async with health.serving(host="127.0.0.1", port=port, readiness=readiness):
        assert (await get(port, "/healthz"))[:2] == (200, "ok\n")
        status, text, _ = await get(port, "/readyz")
        assert status == 503
        assert "- kopf has not started yet" in text
        assert "- indexes not filled yet: pods, jobs.batch not listed" in text
        assert "webhook" not in text

        started.set()
        calls.record(CallKey(verb="list", group="", resource="pods", code="200"))
        calls.record(CallKey(verb="list", group="batch", resource="jobs", code="403"))
        status, text, _ = await get(port, "/readyz")
        assert (status, text) == (503, "not ready:\n- indexes not filled yet: jobs.batch not listed\n")

        calls.record(CallKey(verb="list", group="batch", resource="jobs", code="200"))
        assert (await get(port, "/readyz"))[:2] == (200, "ready\n")

        status, text, content_type = await get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain")
        assert "# TYPE rollouts_api_requests_total counter" in text


async def test_readiness_checks_the_webhook_server_accepts_connections() -> None:
    closed = free_port()
    ready = asyncio.Event()
    ready.set()
    readiness = health.Readiness(
        kopf_ready=ready, resources=[], webhook=("127.0.0.1", closed), calls=ApiCalls()
    )
    assert await readiness.problems() == [f"admission webhook server not listening on 127.0.0.1:{closed}"]


async def test_port_zero_serves_nothing_and_a_taken_port_is_one_clear_error(webhook_port: int) -> None:
    readiness = health.Readiness(kopf_ready=asyncio.Event(), resources=[], webhook=None, calls=ApiCalls())
    async with health.serving(host="127.0.0.1", port=0, readiness=readiness):
        pass
    with pytest.raises(StartupError, match=f"health port 127.0.0.1:{webhook_port} is already in use"):
        async with health.serving(host="127.0.0.1", port=webhook_port, readiness=readiness):
            pass


def test_indexed_resources_come_from_the_registry() -> None:
    registry = kopf.OperatorRegistry()

    @kopf.index("pods", id="a", registry=registry)
    def a(**_: object) -> None: ...

    @kopf.index("batch", "v1", "jobs", id="b", registry=registry)
    def b(**_: object) -> None: ...

    @kopf.index("apps.kusionstack.io", "v1alpha1", "podtransitionrules", id="c", registry=registry)
    def c(**_: object) -> None: ...

    assert health.indexed_resources(registry) == {
        PODS,
        JOBS,
        health.Resource(group="apps.kusionstack.io", resource="podtransitionrules"),
    }


def record(message: str, **extra: object) -> logging.LogRecord:
    found = logging.LogRecord("rollouts.lifecycle", logging.INFO, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(found, key, value)
    return found


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        pytest.param({}, {}, id="plain"),
        pytest.param(
            {**logs.decision("pod", "ns", "web-1", operations=["collaset-update"]), "reason": "pre-check"},
            {"object": "pod/ns/web-1", "operation": ["collaset-update"], "reason": "pre-check"},
            id="decision",
        ),
        pytest.param(
            {"k8s_ref": {"kind": "CollaSet", "namespace": "ns", "name": "web"}},
            {"object": "collaset/ns/web"},
            id="kopf-object-line",
        ),
        pytest.param(
            {**logs.decision("podtransitionrule", None, "gate"), "operation": []},
            {"object": "podtransitionrule/gate"},
            id="cluster-scoped-no-ops",
        ),
    ],
)
def test_json_log_lines(extra: dict[str, object], expected: dict[str, object]) -> None:
    line = json.loads(logs.JsonFormatter().format(record("decided", **extra)))
    assert line.pop("time").endswith("Z")
    assert line == {"level": "INFO", "logger": "rollouts.lifecycle", "message": "decided", **expected}


def test_unknown_log_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log format 'xml'"):
        logs.configure("xml")


@pytest.mark.parametrize(
    ("logger", "message", "routine"),
    [
        pytest.param(
            "kopf.objects", "Handler 'register.<locals>.pod_changed' succeeded.", True, id="handler"
        ),
        pytest.param("kopf.objects", "Webhook 'podopslifecycle-mutate' succeeded.", True, id="webhook"),
        pytest.param("kopf.objects", "Handler 'x' failed temporarily: boom", False, id="failure-kept"),
        pytest.param("rollouts.lifecycle", "Handler 'x' succeeded.", False, id="ours-kept"),
    ],
)
def test_routine_kopf_lines_are_dropped(logger: str, message: str, routine: bool) -> None:
    line = logging.LogRecord(logger, logging.INFO, __file__, 1, message, (), None)
    assert logs.is_routine(line) is routine

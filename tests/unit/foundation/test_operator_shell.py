"""The operator shell's local pieces: webhook TLS, the port check, in-cluster settings."""

from __future__ import annotations

import asyncio
import socket
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from rollouts.operator.certificates import mounted_certificates, write_certificates
from rollouts.operator.running import (
    OperatorConfig,
    ServiceWebhookServer,
    StartupError,
    build_settings,
    check_port_free,
)


def test_serving_certificate_verifies_against_its_ca(tmp_path: Path) -> None:
    files = write_certificates(tmp_path, names=["127.0.0.1", "localhost"])
    ca = x509.load_pem_x509_certificate(files.ca.read_bytes())
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in san.get_values_for_type(x509.DNSName)
    assert (files.key.stat().st_mode & 0o077) == 0


async def test_tls_handshake_with_generated_certificate(tmp_path: Path) -> None:
    files = write_certificates(tmp_path, names=["127.0.0.1"])
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(files.cert, files.key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    client_ctx = ssl.create_default_context(cafile=str(files.ca))
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
    assert await reader.read() == b"ok"
    writer.close()
    server.close()
    await server.wait_closed()


def test_port_in_use_is_one_clear_line() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(StartupError, match=f"port 127.0.0.1:{port} is already in use.*--webhook-port"):
            check_port_free("127.0.0.1", port)


def test_mounted_certificates_report_missing_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"tls\.key"):
        mounted_certificates(tmp_path)


def test_in_cluster_settings_point_webhooks_at_the_service(tmp_path: Path) -> None:
    files = write_certificates(tmp_path, names=["rollouts-webhook.rollouts-system.svc"])
    cfg = OperatorConfig(in_cluster=True, cert_dir=tmp_path, service_name="svc", service_namespace="ns")
    settings = build_settings(cfg, files)
    server = settings.admission.server
    assert isinstance(server, ServiceWebhookServer)
    assert (server.service_name, server.service_namespace, server.addr) == ("svc", "ns", "0.0.0.0")
    assert settings.admission.managed == "rollouts.kusionstack.io"


@pytest.mark.parametrize("grace_delete", [False, True])
def test_every_handler_runs_on_the_event_loop(grace_delete: bool) -> None:
    """kopf runs a sync handler in its thread pool: for our short handlers (index copies,
    wake-ups, admission decisions) the hand-off cost more CPU than the work did, and a sync
    handler setting an ``asyncio.Event`` from a worker thread is not thread-safe."""
    import inspect

    from rollouts.operator.handlers import build_registry

    registry = build_registry(OperatorConfig(grace_delete=grace_delete))
    handlers = [
        *registry._activities.get_all_handlers(),
        *registry._webhooks.get_all_handlers(),
        *registry._indexing.get_all_handlers(),
        *registry._watching.get_all_handlers(),
        *registry._changing.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
    ]
    assert len(handlers) > 20
    sync = sorted(h.id for h in handlers if not inspect.iscoroutinefunction(h.fn))
    assert sync == []


def test_nothing_reads_the_diff_base_kopf_is_told_not_to_build(tmp_path: Path) -> None:
    """kopf's diff base only serves change handlers and idle daemons: there must be none."""
    from rollouts.operator import peering
    from rollouts.operator.handlers import build_registry

    cfg = OperatorConfig(grace_delete=True, peering="rollouts")
    registry = build_registry(cfg)
    settings = build_settings(cfg, write_certificates(tmp_path, names=["127.0.0.1"]))
    peering.enable(registry, settings, name="rollouts", namespace=None, kubeconfig=None, in_cluster=False)
    assert list(registry._changing.get_all_handlers()) == []
    assert [h.id for h in registry._spawning.get_all_handlers() if getattr(h, "idle", None)] == []
    import kopf

    pod = kopf.Body({"metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}})  # type: ignore[typeddict-item]
    assert settings.persistence.diffbase_storage.build(body=pod) == {}
    assert settings.persistence.diffbase_storage.fetch(body=pod) == {}

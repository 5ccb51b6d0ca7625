"""Running the operator: CRDs, webhook TLS and server, kopf settings, clean shutdown.

``rollouts run`` and the integration tests both come through :func:`serve`. Start-up
installs the CRDs (the generator's output, identical to ``crds/`` by the drift test),
makes sure the webhook port is free, builds the TLS material and hands kopf a settings
object; kopf then registers the Validating/MutatingWebhookConfigurations named
``rollouts.kusionstack.io`` and runs the handlers imported by :mod:`rollouts.operator.handlers`.

Two ways to be reached by the API server:

* local (default): the server listens on ``127.0.0.1:<port>`` with a certificate generated
  at start for ``127.0.0.1``; the webhook configurations use its URL;
* in-cluster (``--in-cluster``): it listens on all interfaces with the certificate mounted
  at ``/etc/rollouts/tls`` and the webhook configurations point at the operator's Service.

The install manifests (:mod:`rollouts.manifests`) carry the CRDs and the webhook
configurations and run two replicas with ``--skip-crds --skip-webhook-configs --peering``
(:mod:`rollouts.operator.peering`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import errno
import logging
import os
import signal
import socket
import tempfile
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kopf
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from rollouts import crdgen, kube
from rollouts.operator.certificates import CertificateFiles, mounted_certificates, write_certificates

WEBHOOK_CONFIGURATION_NAME = "rollouts.kusionstack.io"
DEFAULT_CERT_DIR = Path("/etc/rollouts/tls")

log = logging.getLogger("rollouts.operator")


class StartupError(Exception):
    """The operator cannot start; the message says what to do."""


@dataclass(frozen=True, kw_only=True)
class OperatorConfig:
    kubeconfig: str | None = None
    namespace: str | None = None
    webhook_host: str = "127.0.0.1"
    webhook_port: int = 9443
    in_cluster: bool = False
    cert_dir: Path | None = None
    service_name: str = "rollouts-webhook"
    service_namespace: str = "rollouts-system"
    #: Serve the pod lifecycle webhooks; with False the controller alone advances the lifecycle.
    pod_webhooks: bool = True
    #: Controller modules to register (``lifecycle``, ``transitionrules``, ``collasets``); None: all.
    controllers: frozenset[str] | None = None
    #: Turn a plain DELETE of a controlled pod into a ``delete`` operation (off by default).
    grace_delete: bool = False
    #: Apply the CRDs at start; off when the install manifests carry them (no write access to CRDs).
    install_crds: bool = True
    #: Create and patch the webhook configurations; off when the install manifests carry them.
    manage_webhooks: bool = True
    #: Run as one of several replicas under this kopf peering name (:mod:`rollouts.operator.peering`).
    peering: str | None = None
    #: Port of /healthz, /readyz and /metrics (:mod:`rollouts.operator.health`); 0: no server.
    #: ``rollouts run`` defaults to 8080; tests pick a free port or leave it off.
    health_port: int = 0


class ServiceWebhookServer(kopf.WebhookServer):
    """Serves like kopf's server but tells the API server to call it through a Service."""

    def __init__(self, *, service_name: str, service_namespace: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.service_name = service_name
        self.service_namespace = service_namespace

    async def __call__(self, fn: Any) -> AsyncIterator[kopf.WebhookClientConfig]:
        async for client_config in super().__call__(fn):
            service_config = kopf.WebhookClientConfig(
                service=kopf.WebhookClientConfigService(
                    name=self.service_name, namespace=self.service_namespace, port=443, path=""
                )
            )
            if "caBundle" in client_config:
                service_config["caBundle"] = client_config["caBundle"]
            yield service_config


def check_port_free(host: str, port: int) -> None:
    """Fail with one clear line when the webhook port is taken.

    kopf binds with SO_REUSEPORT, which on Linux can silently share the port with another
    process of the same user (requests would then go to either); so we check first.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # SO_REUSEADDR ignores TIME_WAIT leftovers of a previous run (a restart) but still
        # refuses a port someone listens on.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"webhook port {host}:{port} is already in use: stop the process holding it "
                    f"(e.g. another 'rollouts run') or pass --webhook-port"
                ) from e
            raise StartupError(f"cannot listen on {host}:{port}: {e.strerror}") from e


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _certificates(cfg: OperatorConfig) -> CertificateFiles:
    if cfg.in_cluster:
        return mounted_certificates(cfg.cert_dir or DEFAULT_CERT_DIR)
    directory = cfg.cert_dir or Path(tempfile.mkdtemp(prefix="rollouts-webhook-tls-"))
    return write_certificates(directory, names=[cfg.webhook_host, "localhost"])


class UnreadDiffBase(kopf.AnnotationsDiffBaseStorage):
    """kopf's diff base, which this operator never reads: not built, always empty.

    kopf builds an "essence" (a deep copy of most of the object) of every object on every
    watch event to diff it with the last handled one; only change handlers (``on.create``,
    ``on.update``, ``on.field`` ...) and idle daemons use the diff. The operator has neither
    (a test walks the registry), and in a 1,000-pod rollout the copies and diffs were 5% of
    its CPU.
    """

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> Any:
        return {}

    def fetch(self, *, body: kopf.Body) -> Any:
        return {}


def build_settings(cfg: OperatorConfig, certs: CertificateFiles) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.persistence.finalizer = "rollouts.kusionstack.io/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="rollouts.kusionstack.io")
    settings.persistence.diffbase_storage = UnreadDiffBase(
        prefix="rollouts.kusionstack.io", key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.reconnect_backoff = 0.5
    settings.networking.request_timeout = 30
    settings.admission.managed = WEBHOOK_CONFIGURATION_NAME if cfg.manage_webhooks else None
    common: dict[str, Any] = {
        "port": cfg.webhook_port,
        "certfile": str(certs.cert),
        "pkeyfile": str(certs.key),
        "cafile": str(certs.ca),
    }
    if cfg.in_cluster:
        settings.admission.server = ServiceWebhookServer(
            addr="0.0.0.0", service_name=cfg.service_name, service_namespace=cfg.service_namespace, **common
        )
    else:
        settings.admission.server = kopf.WebhookServer(addr=cfg.webhook_host, host=cfg.webhook_host, **common)
    return settings


async def serve(
    cfg: OperatorConfig,
    *,
    stop_flag: asyncio.Event | threading.Event | None = None,
    ready_flag: asyncio.Event | threading.Event | None = None,
) -> None:
    """Run the operator until ``stop_flag`` is set (or SIGTERM/SIGINT when run from the CLI)."""
    if cfg.kubeconfig:
        # kopf's own login reads $KUBECONFIG; our API client gets the path explicitly.
        os.environ["KUBECONFIG"] = str(cfg.kubeconfig)
    if not cfg.in_cluster:
        check_port_free(cfg.webhook_host, cfg.webhook_port)
    if cfg.install_crds:
        async with kube.api_session(cfg.kubeconfig, in_cluster=cfg.in_cluster) as api:
            await kube.apply_crds(api, crdgen.crd_objects())
    certs = _certificates(cfg)
    from rollouts.operator.handlers import build_registry

    namespaces = [cfg.namespace] if cfg.namespace else []
    registry, settings = build_registry(cfg), build_settings(cfg, certs)
    peering_args: dict[str, Any] = {"standalone": True}
    if cfg.peering:
        from rollouts.operator import peering

        peering_args = peering.enable(
            registry,
            settings,
            name=cfg.peering,
            namespace=cfg.namespace,
            kubeconfig=cfg.kubeconfig,
            in_cluster=cfg.in_cluster,
        )
    from rollouts.operator import health

    ready = ready_flag if ready_flag is not None else asyncio.Event()
    readiness = health.Readiness(
        kopf_ready=ready,
        resources=health.indexed_resources(registry),
        webhook=("127.0.0.1" if cfg.in_cluster else cfg.webhook_host, cfg.webhook_port),
    )
    if cfg.peering:
        from rollouts.operator import peering

        # A standby (paused by kopf) lists nothing yet serves webhooks: ready without indexes.
        readiness = peering.standby_readiness(readiness, settings)
    host = "0.0.0.0" if cfg.in_cluster else "127.0.0.1"
    async with health.serving(host=host, port=cfg.health_port, readiness=readiness):
        await kopf.operator(
            registry=registry,
            settings=settings,
            **peering_args,
            clusterwide=not namespaces,
            namespaces=namespaces,
            stop_flag=stop_flag,
            ready_flag=ready,
        )


def run_operator(cfg: OperatorConfig, *, log_format: str = "text") -> None:
    """The blocking entry point of ``rollouts run``: SIGTERM and SIGINT stop it cleanly."""
    from rollouts.operator import logs

    logs.configure(log_format)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(cfg, stop_flag=stop)

    asyncio.run(main())


async def wait_webhooks_registered(cfg: OperatorConfig, *, timeout: float = 60) -> None:
    """kopf registers the webhook configurations after it reports ready: wait until both name our port.

    Until then a configuration left by an earlier run may point at a closed port, and its
    validating webhook (failurePolicy Fail) refuses controlled pods.
    """
    wanted = f":{cfg.webhook_port}/"
    async with kube.api_session(cfg.kubeconfig) as api:
        admission = client.AdmissionregistrationV1Api(api)
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            urls: list[str] = []
            for read in (
                admission.read_mutating_webhook_configuration,
                admission.read_validating_webhook_configuration,
            ):
                try:
                    config = await read(WEBHOOK_CONFIGURATION_NAME)
                except ApiException as e:
                    if e.status != 404:
                        raise
                    continue
                urls.append(" ".join(w.client_config.url or "" for w in config.webhooks or []))
            if len(urls) == 2 and all(wanted in u for u in urls):
                return
            if asyncio.get_running_loop().time() > deadline:
                raise StartupError(f"webhook configurations not registered for port {cfg.webhook_port}")
            await asyncio.sleep(0.2)


class OperatorThread:
    """The operator in a background thread of this process (tests, playground).

    ``stop()`` ends it as SIGTERM would; a new instance with the same config is a restart.
    """

    def __init__(self, cfg: OperatorConfig) -> None:
        self.cfg = cfg
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="rollouts-operator", daemon=True)

    def _run(self) -> None:
        try:
            asyncio.run(serve(self.cfg, stop_flag=self._stop, ready_flag=self._ready))
        except BaseException as e:  # reported to the starting thread
            self._error = e
            self._ready.set()

    def start(self, *, timeout: float = 60) -> OperatorThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise StartupError(f"operator not ready within {timeout:.0f}s")
        if self._error is not None:
            raise StartupError(f"operator failed to start: {self._error!r}") from self._error
        if not self.cfg.in_cluster and self.cfg.manage_webhooks:
            # A thread of its own: the caller may be inside an event loop (asyncio.run cannot nest).
            with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
                pool.submit(lambda: asyncio.run(wait_webhooks_registered(self.cfg, timeout=timeout))).result()
        return self

    def stop(self, *, timeout: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise StartupError(f"operator did not stop within {timeout:.0f}s")

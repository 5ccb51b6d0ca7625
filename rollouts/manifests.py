"""Install manifests for a real cluster, rendered from the jinja2 templates in ``rollouts/templates/``.

``rollouts manifests [--namespace NS] [--image IMG] [--cert-manager]`` prints one YAML stream
for ``kubectl apply -f -``, in the order a fresh cluster needs it:

1. the Namespace; the CRDs (ours, from the API models, identical to ``crds/``, and kopf's
   peering CRD);
2. the ServiceAccount and its least-privilege ClusterRole (``rbac.yaml.j2`` says why each rule
   is there; the integration test checks them against the calls the operator makes);
3. webhook TLS: a CA and serving certificate generated here, at render time, into a Secret
   (the CA's key is not kept), or cert-manager objects with ``--cert-manager``;
4. the Service, the two-replica Deployment (kopf peering) and its PodDisruptionBudget;
5. the admission webhook configurations, last: they point at the Service.

Each template comments its choices in the rendered YAML. The operator runs with
``--skip-crds --skip-webhook-configs``: the manifests own those objects, so the operator
needs no write access to CRDs or admission configurations.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import jinja2
import yaml
from cryptography import x509

from rollouts import crdgen
from rollouts.operator.certificates import generate_pem
from rollouts.operator.running import OperatorConfig

DEFAULT_NAMESPACE = "rollouts-system"
PEERING_NAME = "rollouts"
REPLICAS = 2
HEALTH_PORT = 8080
#: Validity of the serving certificate made at render time (render and apply again to renew).
TLS_DAYS = 825
TLS_CHECKSUM_ANNOTATION = "rollouts.kusionstack.io/tls-checksum"

#: The image's entrypoint (the Dockerfile's ENTRYPOINT; a unit test compares them).
ENTRYPOINT = ("rollouts", "run", "--in-cluster")
#: What the Deployment adds to the entrypoint.
OPERATOR_ARGS = (
    "--skip-crds",
    "--skip-webhook-configs",
    "--peering",
    PEERING_NAME,
    "--health-port",
    str(HEALTH_PORT),
)

#: Rendered in this order (see the module docstring).
TEMPLATES = (
    "namespace.yaml.j2",
    "peering.yaml.j2",
    "rbac.yaml.j2",
    "tls.yaml.j2",
    "service.yaml.j2",
    "deployment.yaml.j2",
    "webhooks.yaml.j2",
)

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class ManifestError(ValueError):
    """A render option is unusable; the message says which and why."""


@dataclass(frozen=True)
class Names:
    """Object names; cluster-scoped ones are fixed, so one installation per cluster."""

    service_account: str = "rollouts-operator"
    cluster_role: str = "rollouts-operator"
    deployment: str = "rollouts-operator"
    webhook_configuration: str = "rollouts-operator"
    service: str = OperatorConfig.service_name
    tls_secret: str = "rollouts-webhook-tls"
    certificate: str = "rollouts-webhook"
    ca: str = "rollouts-webhook-ca"
    self_signed_issuer: str = "rollouts-selfsigned"


NAMES = Names()


def version() -> str:
    try:
        return importlib.metadata.version("rollouts")
    except importlib.metadata.PackageNotFoundError:
        return "0.0.0"


def default_image() -> str:
    """The tag ``docker build -t rollouts:<version> .`` gives the image of this source tree."""
    return f"rollouts:{version()}"


def dns_names(namespace: str, service: str = NAMES.service) -> list[str]:
    """The names the API server may use to reach the webhook Service."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("rollouts", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    # JSON scalars and flow mappings are YAML; keep the keys in the order we wrote them.
    env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    return env


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _self_signed_tls(namespace: str) -> dict[str, Any]:
    ca, cert, key = generate_pem(names=dns_names(namespace), days=TLS_DAYS)
    not_after = x509.load_pem_x509_certificate(cert).not_valid_after_utc
    return {
        "ca_b64": _b64(ca),
        "cert_b64": _b64(cert),
        "key_b64": _b64(key),
        "days": TLS_DAYS,
        "not_after": not_after.strftime("%Y-%m-%d"),
        "checksum": hashlib.sha256(cert).hexdigest()[:16],
    }


def _check(namespace: str, image: str) -> None:
    if len(namespace) > 63 or not _DNS_LABEL.match(namespace):
        raise ManifestError(
            f"--namespace {namespace!r} is not a valid namespace name: lowercase letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )
    if not image or any(c.isspace() for c in image):
        raise ManifestError(
            f"--image {image!r} is not an image reference (e.g. registry.example.com/rollouts:1.0)"
        )


def render_context(*, namespace: str, image: str, cert_manager: bool) -> dict[str, Any]:
    tls = None if cert_manager else _self_signed_tls(namespace)
    labels = {
        "app.kubernetes.io/name": "rollouts",
        "app.kubernetes.io/part-of": "rollouts",
        "app.kubernetes.io/version": version(),
        "app.kubernetes.io/managed-by": "rollouts-manifests",
    }
    selector = {"app.kubernetes.io/name": "rollouts", "app.kubernetes.io/component": "operator"}
    pod_annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(HEALTH_PORT),
        "prometheus.io/path": "/metrics",
    }
    if tls is not None:
        # A new certificate changes the pod template, so applying it rolls the pods onto it.
        pod_annotations[TLS_CHECKSUM_ANNOTATION] = tls["checksum"]
    return {
        "namespace": namespace,
        "image": image,
        "version": version(),
        "cert_manager": cert_manager,
        "names": asdict(NAMES),
        "labels": labels,
        "selector": selector,
        "pod_labels": {**labels, **selector},
        "pod_annotations": pod_annotations,
        "replicas": REPLICAS,
        "args": list(OPERATOR_ARGS),
        "peering": PEERING_NAME,
        "webhook_port": OperatorConfig.webhook_port,
        "health_port": HEALTH_PORT,
        "dns_names": dns_names(namespace),
        "tls": tls,
        "ca_bundle": None if tls is None else tls["ca_b64"],
    }


@functools.cache
def _crds_yaml() -> str:
    head = "# The CRDs of CollaSet and PodTransitionRule, generated from the API models (= crds/).\n"
    return head + "---\n".join(yaml.safe_dump(crd, sort_keys=False) for crd in crdgen.crd_objects())


def render_manifests(
    *, namespace: str = DEFAULT_NAMESPACE, image: str | None = None, cert_manager: bool = False
) -> str:
    """The install manifests as one YAML stream."""
    image = image if image is not None else default_image()
    _check(namespace, image)
    context = render_context(namespace=namespace, image=image, cert_manager=cert_manager)
    env = _environment()
    parts = [env.get_template(name).render(context).lstrip("\n") for name in TEMPLATES]
    parts.insert(1, _crds_yaml())
    header = (
        f"# rollouts {version()} install manifests, rendered by `rollouts manifests --namespace {namespace}"
        f" --image {image}{' --cert-manager' if cert_manager else ''}`.\n"
        "# Apply with: kubectl apply --server-side -f <this file>\n"
        f"# then wait for: kubectl -n {namespace} rollout status deployment/{NAMES.deployment}\n"
        "# (until the operator is ready, its webhooks refuse writes of CollaSets, PodTransitionRules\n"
        "# and pods labelled kusionstack.io/control=true).\n"
    )
    return header + "---\n".join(part if part.endswith("\n") else part + "\n" for part in parts)


def render_objects(
    *, namespace: str = DEFAULT_NAMESPACE, image: str | None = None, cert_manager: bool = False
) -> list[dict[str, Any]]:
    """The install manifests as objects (documents that are only comments are dropped)."""
    text = render_manifests(namespace=namespace, image=image, cert_manager=cert_manager)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built with it: 10x faster
    return [dict(doc) for doc in yaml.load_all(text, Loader=loader) if isinstance(doc, Mapping)]


def rbac_allows(
    rules: list[Mapping[str, Any]], *, verb: str, group: str, resource: str, name: str | None = None
) -> bool:
    """Whether RBAC ``rules`` grant a request, matched as the API server's RBAC authorizer does.

    ``resource`` may name a subresource (``pods/status``), granted by the exact name, ``*/status``
    or ``*``; a rule with ``resourceNames`` grants only requests for those names.
    """
    subresource = resource.partition("/")[2]
    for rule in rules:
        if not {verb, "*"} & set(rule.get("verbs") or []):
            continue
        if not {group, "*"} & set(rule.get("apiGroups") or []):
            continue
        granted = rule.get("resources") or []
        if not any(r in ("*", resource) or (subresource and r == f"*/{subresource}") for r in granted):
            continue
        names = rule.get("resourceNames") or []
        if names and name not in names:
            continue
        return True
    return False

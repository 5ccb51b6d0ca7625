"""What the operator needs from RBAC, derived from the code: the install manifests' tests use it.

Three derivations, each independent of the ClusterRole they check:

* :func:`registry_needs`: from the kopf registry the installed operator builds (its Deployment's
  flags): every watched or indexed resource needs ``list`` and ``watch``, every resource with a
  daemon or a change handler ``patch`` (kopf's finalizer and annotations), plus kopf's own
  needs (the CRD scan, Events, the peering object);
* :func:`code_needs`: from the source, every call of a typed kubernetes_asyncio API method (or
  of ``CustomObjectsApi`` with constant group and plural), mapped through the method's own URL
  template and :func:`rollouts.apicalls.classify`;
* the integration test counts the calls of a real run (:data:`rollouts.apicalls.API_CALLS`).
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
from kopf._cogs.structs.references import Resource
from kubernetes_asyncio import client
from yarl import URL

from rollouts import crdgen
from rollouts.apicalls import classify
from rollouts.cli import build_parser
from rollouts.cli import operator_config as cli_operator_config
from rollouts.manifests import ENTRYPOINT
from rollouts.operator import peering
from rollouts.operator.running import OperatorConfig

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, order=True)
class Need:
    verb: str
    group: str
    resource: str
    #: The object's name when the request names one we restrict by ``resourceNames``.
    name: str | None = field(default=None, compare=True)


# -- the Deployment --------------------------------------------------------------------------------


def deployment(objects: Iterable[Mapping[str, Any]]) -> Mapping[str, Any]:
    (found,) = [o for o in objects if o["kind"] == "Deployment"]
    return found


def cluster_role_rules(objects: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    (role,) = [o for o in objects if o["kind"] == "ClusterRole"]
    return list(role["rules"])


def operator_command(objects: Iterable[Mapping[str, Any]]) -> list[str]:
    """The operator's command line in the Deployment: the image's entrypoint and the container's args."""
    (container,) = deployment(objects)["spec"]["template"]["spec"]["containers"]
    return [*(container.get("command") or ENTRYPOINT), *container.get("args", [])]


def operator_config(objects: Iterable[Mapping[str, Any]], **overrides: Any) -> OperatorConfig:
    """The OperatorConfig ``rollouts run`` builds from the Deployment's command line."""
    command = operator_command(objects)
    assert command[:2] == ["rollouts", "run"], command
    config = cli_operator_config(build_parser().parse_args(command[1:]))
    return OperatorConfig(**{**config.__dict__, **overrides})


# -- the kopf registry -----------------------------------------------------------------------------


def catalogue() -> list[Resource]:
    """The API resources the operator may address: ours from the CRD generator, builtins by hand.

    A handler on a resource missing here fails :func:`registry_needs`, so the list cannot go stale.
    """
    found = [
        Resource(
            "", "v1", "pods", kind="Pod", singular="pod", namespaced=True, subresources=frozenset({"status"})
        ),
        Resource("", "v1", "events", kind="Event", singular="event", namespaced=True),
        Resource("", "v1", "namespaces", kind="Namespace", singular="namespace", namespaced=False),
        Resource("apps", "v1", "controllerrevisions", kind="ControllerRevision", namespaced=True),
        Resource("batch", "v1", "jobs", kind="Job", singular="job", namespaced=True),
        Resource(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            kind="CustomResourceDefinition",
            namespaced=False,
        ),
        Resource(
            peering.PEERING_GROUP,
            peering.PEERING_VERSION,
            peering.CLUSTER_PEERINGS,
            kind="ClusterKopfPeering",
            namespaced=False,
        ),
        Resource(
            peering.PEERING_GROUP,
            peering.PEERING_VERSION,
            peering.NAMESPACED_PEERINGS,
            kind="KopfPeering",
            namespaced=True,
        ),
    ]
    for crd in crdgen.crd_objects():
        spec = crd["spec"]
        for version in spec["versions"]:
            subresources = frozenset((version.get("subresources") or {}).keys())
            found.append(
                Resource(
                    spec["group"],
                    version["name"],
                    spec["names"]["plural"],
                    kind=spec["names"]["kind"],
                    singular=spec["names"].get("singular"),
                    shortcuts=frozenset(spec["names"].get("shortNames") or []),
                    namespaced=spec["scope"] == "Namespaced",
                    subresources=subresources,
                )
            )
    return found


def resolve(selector: Any) -> Resource:
    matched = [r for r in catalogue() if selector.check(r)]
    assert len(matched) == 1, (
        f"handler selector {selector} matches {matched}: add the resource to catalogue()"
    )
    return matched[0]


def installed_registry(cfg: OperatorConfig) -> tuple[kopf.OperatorRegistry, kopf.OperatorSettings]:
    """The registry and settings ``serve`` builds for ``cfg`` (without certificates or a cluster)."""
    from rollouts.operator.handlers import build_registry

    registry, settings = build_registry(cfg), kopf.OperatorSettings()
    settings.admission.managed = "x" if cfg.manage_webhooks else None
    if cfg.peering:
        peering.enable(
            registry, settings, name=cfg.peering, namespace=cfg.namespace, kubeconfig=None, in_cluster=False
        )
    return registry, settings


def registry_needs(cfg: OperatorConfig) -> set[Need]:
    registry, settings = installed_registry(cfg)
    needs: set[Need] = set()
    watched = [
        *registry._watching.get_all_handlers(),
        *registry._indexing.get_all_handlers(),
        *registry._changing.get_all_handlers(),
        *registry._spawning.get_all_handlers(),
    ]
    for handler in watched:
        resource = resolve(handler.selector)
        needs |= {
            Need("list", resource.group, resource.plural),
            Need("watch", resource.group, resource.plural),
        }
    for handler in [*registry._changing.get_all_handlers(), *registry._spawning.get_all_handlers()]:
        resource = resolve(handler.selector)
        needs.add(Need("patch", resource.group, resource.plural))  # finalizers, progress annotations
    if not settings.scanning.disabled:
        needs |= {Need("list", "apiextensions.k8s.io", "customresourcedefinitions")}
        needs |= {Need("watch", "apiextensions.k8s.io", "customresourcedefinitions")}
    if settings.posting.enabled:
        needs.add(Need("create", "", "events"))
    if settings.admission.managed:
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            needs |= {Need("create", "admissionregistration.k8s.io", kind)}
            needs |= {Need("patch", "admissionregistration.k8s.io", kind)}
    if cfg.peering:
        plural = peering.CLUSTER_PEERINGS if cfg.namespace is None else peering.NAMESPACED_PEERINGS
        needs |= {Need("list", peering.PEERING_GROUP, plural), Need("watch", peering.PEERING_GROUP, plural)}
        needs.add(Need("patch", peering.PEERING_GROUP, plural, cfg.peering))  # the keep-alives
    return needs


# -- the source ------------------------------------------------------------------------------------

#: Calls the installed operator does not make, by (module, function): why.
NOT_INSTALLED = {
    ("rollouts.kube", "apply_crds"): "--skip-crds: the manifests install the CRDs",
    (
        "rollouts.operator.running",
        "wait_webhooks_registered",
    ): "local mode only (kopf-managed configurations)",
}
#: The sources of the operator process (the CLI's other commands run elsewhere).
SOURCES = ("rollouts/operator", "rollouts/kube.py")


@functools.cache
def _api_classes() -> list[type]:
    return [
        cls for name in dir(client) if name.endswith("Api") and inspect.isclass(cls := getattr(client, name))
    ]


@functools.cache
def _api_method(name: str) -> list[tuple[str, str]]:
    """[(HTTP method, URL template)] of a typed API method ``name`` in every kubernetes_asyncio class."""
    found: list[tuple[str, str]] = []
    if name.startswith("_") or name.endswith("_with_http_info"):
        return found
    for cls in _api_classes():
        detail = getattr(cls, f"{name}_with_http_info", None)
        if detail is None:
            continue
        source = inspect.getsource(detail)
        paths = re.findall(r"'(/apis?/[^']*)'", source)
        methods = re.findall(r"'(GET|POST|PUT|PATCH|DELETE)'", source)
        if len(paths) == 1 and methods:
            found.append((methods[0], paths[0]))
    return found


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


def _calls(path: Path) -> Iterator[tuple[str, ast.Call]]:
    """(enclosing function, call) for every call in a module."""
    tree = ast.parse(path.read_text())

    def walk(node: ast.AST, function: str) -> Iterator[tuple[str, ast.Call]]:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Call):
                yield function, _unwrapped(child)
            yield from walk(child, name)

    yield from walk(tree, "")


def _unwrapped(call: ast.Call) -> ast.Call:
    """``kube.send(api.method, *args, **kw)`` read as the API call ``api.method(*args, **kw)``."""
    func = call.func
    if (
        isinstance(func, ast.Attribute)
        and func.attr == "send"
        and call.args
        and isinstance(func.value, ast.Name)
        and func.value.id == "kube"
    ):
        return ast.Call(func=call.args[0], args=call.args[1:], keywords=call.keywords)
    return call


def _constant(node: ast.expr, module: Any) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and isinstance(getattr(module, node.id, None), str):
        return str(getattr(module, node.id))
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        owner = getattr(module, node.value.id, None)
        if isinstance(getattr(owner, node.attr, None), str):
            return str(getattr(owner, node.attr))
    raise AssertionError(f"{module.__name__}: cannot resolve {ast.unparse(node)} to a constant")


def code_needs() -> dict[Need, list[str]]:
    """Every API call in the operator's source: need -> where (``module:function``)."""
    needs: dict[Need, list[str]] = {}
    files = [p for s in SOURCES for p in ((ROOT / s).rglob("*.py") if (ROOT / s).is_dir() else [ROOT / s])]
    for path in sorted(files):
        module_name = _module_name(path)
        module = importlib.import_module(module_name)
        for function, call in _calls(path):
            if not isinstance(call.func, ast.Attribute) or not _api_method(call.func.attr):
                continue
            if (module_name, function) in NOT_INSTALLED:
                continue
            candidates = _api_method(call.func.attr)
            assert len({c for c in candidates}) == 1, f"{call.func.attr} is ambiguous: {candidates}"
            http_method, template = candidates[0]
            placeholders = re.findall(r"{(\w+)}", template)
            if {"group", "plural"} & set(placeholders):
                parameters = [
                    p for p in inspect.signature(getattr(client.CustomObjectsApi, call.func.attr)).parameters
                ][1:]
                given = dict(zip(parameters, call.args, strict=False))
                given |= {k.arg: k.value for k in call.keywords if k.arg}
                values = {
                    p: _constant(given[p], module) for p in ("group", "version", "plural") if p in given
                }
            else:
                values = {}
            url = template
            for placeholder in placeholders:
                url = url.replace(f"{{{placeholder}}}", values.get(placeholder, f"x-{placeholder}"))
            verb, group, resource = classify(http_method, URL("https://api" + url))
            needs.setdefault(Need(verb, group, resource), []).append(f"{module_name}:{function}")
    return needs


def installed_code_needs(cfg: OperatorConfig) -> dict[Need, list[str]]:
    """:func:`code_needs` of the installed operator: its peering kind, named peering requests."""
    needs: dict[Need, list[str]] = {}
    plural = peering.CLUSTER_PEERINGS if cfg.namespace is None else peering.NAMESPACED_PEERINGS
    for need, where in code_needs().items():
        if need.group == peering.PEERING_GROUP:
            if need.resource != plural or not cfg.peering:
                continue  # the other peering kind (--namespace or not); no peering at all
            if need.verb not in ("create", "list", "watch"):
                need = Need(need.verb, need.group, need.resource, cfg.peering)
        needs.setdefault(need, []).extend(where)
    return needs

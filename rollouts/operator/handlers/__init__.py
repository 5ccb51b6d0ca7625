"""All kopf handlers of the operator, registered on a fresh registry per run.

Handlers are thin: they turn kopf's arguments into the pure functions' inputs and the
pure functions' errors into admission errors or retries. Each handler module has a
``register(registry, cfg)`` function; :func:`build_registry` calls them, so a restart with
other settings (e.g. the pod webhooks off) registers exactly what that run needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kopf

if TYPE_CHECKING:
    from rollouts.operator.running import OperatorConfig


def _register_login(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.AiohttpSession | None:
        """Credentials from the kubeconfig ($KUBECONFIG, set from --kubeconfig) or the service account.

        kopf's session is built here so its requests are counted with ours (:mod:`rollouts.apicalls`).
        """
        from rollouts import apicalls

        if cfg.in_cluster:
            info = kopf.login_with_service_account(**kwargs)
        else:
            info = kopf.login_with_kubeconfig(**kwargs)
        return None if info is None else apicalls.kopf_session(info)


def _register_api_client(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    """One long-lived API client per run (``memo["api"]``) for the controllers' writes."""

    @kopf.on.startup(registry=registry)
    async def open_api_client(memo: kopf.Memo, **_: Any) -> None:
        from rollouts import apicalls, kube

        memo["api"] = await kube.new_api_client(cfg.kubeconfig, in_cluster=cfg.in_cluster)
        apicalls.instrument(memo["api"])

    @kopf.on.cleanup(registry=registry)
    async def close_api_client(memo: kopf.Memo, **_: Any) -> None:
        api = memo.get("api")
        if api is not None:
            await api.close()


def build_registry(cfg: OperatorConfig) -> kopf.OperatorRegistry:
    from rollouts.operator import fastpatch
    from rollouts.operator.handlers import admission, indexes

    fastpatch.install()
    registry = kopf.OperatorRegistry()
    _register_login(registry, cfg)
    _register_api_client(registry, cfg)
    indexes.register(registry)
    admission.register(registry)
    for module in _optional_modules(cfg.controllers):
        module.register(registry, cfg)
    return registry


def _optional_modules(only: frozenset[str] | None = None) -> list[Any]:
    """Controller modules, each with ``register(registry, cfg)``; imported lazily to keep start-up cheap."""
    import importlib

    names = ["lifecycle", "transitionrules", "collasets", "observing"]
    modules = []
    for name in names:
        if only is not None and name not in only:
            continue
        try:
            modules.append(importlib.import_module(f"rollouts.operator.handlers.{name}"))
        except ModuleNotFoundError as e:
            if e.name != f"rollouts.operator.handlers.{name}":
                raise
    return modules

"""All kopf handlers of the operator, registered on one :data:`registry`.

Handlers are thin: they turn kopf's arguments into the pure functions' inputs and the
pure functions' errors into admission errors or retries. Importing this package
registers every handler; :func:`configure` passes the run's settings to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kopf

if TYPE_CHECKING:
    from rollouts.operator.running import OperatorConfig

registry = kopf.OperatorRegistry()

_config: OperatorConfig | None = None


def configure(cfg: OperatorConfig) -> None:
    global _config
    _config = cfg


def current_config() -> OperatorConfig:
    if _config is None:
        raise RuntimeError("the operator's handlers were used before configure()")
    return _config


@kopf.on.login(registry=registry)
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """Credentials from the kubeconfig ($KUBECONFIG, set from --kubeconfig) or the service account."""
    if current_config().in_cluster:
        return kopf.login_with_service_account(**kwargs)
    return kopf.login_with_kubeconfig(**kwargs)


# Registration happens on import; keep these imports at the bottom.
from rollouts.operator.handlers import admission  # noqa: E402, F401

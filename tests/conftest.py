"""Shared test configuration: tiers are chosen by directory (unit, integration, examples).

The cluster fixtures are registered here, once, so every tier that asks for them shares the
session's cluster and operator (see :mod:`tests.cluster_support`).
"""

from tests.cluster_support import api, kubeconfig, namespace, operator

__all__ = ["api", "kubeconfig", "namespace", "operator"]

"""Fixtures of the examples tier: the integration tier's (cluster, API client, operator, namespace)."""

from tests.integration.conftest import *  # noqa: F403

"""CollaSet metrics from the CollaSet watch: hook runs by outcome and duration, rollout duration.

The CollaSet controller records every hook run in ``status.hooks`` (phase, start and finish
time) and moves ``currentRevision`` to ``updatedRevision`` when a rollout is done; this
handler reads those statuses as the watch delivers them
(:class:`rollouts.operator.metrics.RolloutObserver`), so the metrics need nothing from the
controller itself and cost no API call (kopf shares one watch per resource among handlers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import kopf

from rollouts.api.collasets import GROUP, VERSION
from rollouts.operator import metrics

if TYPE_CHECKING:
    from rollouts.operator.running import OperatorConfig


def register(registry: kopf.OperatorRegistry, cfg: OperatorConfig) -> None:
    observer = metrics.RolloutObserver()

    @kopf.on.event(GROUP, VERSION, "collasets", registry=registry)
    async def collaset_observed(type: str | None, body: kopf.Body, **_: Any) -> None:
        """Count the hook runs and rollouts this status shows finished for the first time."""
        observer.observe(kind=type, collaset=dict(body))

"""In-memory indexes fed by kopf's watches: what controllers observe instead of LISTing.

kopf keeps each index complete before handlers run and passes it to them as a keyword
argument named after the index function (``control_pods``, ``transition_rules``).
The index functions are ``async``: kopf runs sync handlers in a thread pool, and the
hand-off costs more than these copies do.
Bodies are stored without ``managedFields``, which can be most of a pod's size.
"""

from __future__ import annotations

from typing import Any

import kopf

from lifecycle.labels import CONTROL, CONTROL_VALUE

GROUP = "apps.kusionstack.io"
VERSION = "v1alpha1"


def snapshot(body: kopf.Body | dict[str, Any]) -> dict[str, Any]:
    """A plain copy of an object without managedFields."""
    raw = dict(body)
    meta = dict(raw.get("metadata") or {})
    meta.pop("managedFields", None)
    raw["metadata"] = meta
    return raw


def register(registry: kopf.OperatorRegistry) -> None:
    # explicit ids: the default would be the qualified name "register.<locals>.control_pods"
    @kopf.index("pods", labels={CONTROL: CONTROL_VALUE}, id="control_pods", registry=registry)
    async def control_pods(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        """Pods under the lifecycle (``kusionstack.io/control: "true"``), by namespace."""
        return {namespace or "": snapshot(body)}

    @kopf.index(GROUP, VERSION, "podtransitionrules", id="transition_rules", registry=registry)
    async def transition_rules(namespace: str | None, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
        """PodTransitionRules by namespace: rules never select pods across namespaces."""
        return {namespace or "": snapshot(body)}

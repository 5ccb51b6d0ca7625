"""The pods rules look at: a frozen view built once per reconcile from the pod index.

Evaluation (:mod:`lifecycle.rules.evaluating`) and webhook request building
(:mod:`lifecycle.rules.webhooks`) both read pods only through :class:`PodView`, so they
never see a live API object. Which stage a pod is in is decided by the PodOpsLifecycle
state machine and handed in; availability is the ``service-available`` label.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lifecycle import labels
from lifecycle.rules.models import Stage


@dataclass(frozen=True, kw_only=True)
class PodView:
    """One pod as the rules see it; ``manifest`` is the full object, for webhook parameters."""

    name: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    stage: Stage | None = None
    available: bool = False
    manifest: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_pod(cls, pod: Mapping[str, Any], *, stage: Stage | None) -> PodView:
        """A view of a pod as the API returns it (a dict); available iff it has service-available."""
        metadata = pod.get("metadata") or {}
        pod_labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        return cls(
            name=str(metadata.get("name", "")),
            namespace=str(metadata.get("namespace", "")),
            labels=pod_labels,
            annotations={str(k): str(v) for k, v in (metadata.get("annotations") or {}).items()},
            stage=stage,
            available=labels.SERVICE_AVAILABLE in pod_labels,
            manifest=pod,
        )

    def is_operating(self) -> bool:
        """Whether any operation is under way (an ``operating.../<id>`` label is present)."""
        prefix = f"{labels.OPERATING}/"
        return any(key.startswith(prefix) for key in self.labels)

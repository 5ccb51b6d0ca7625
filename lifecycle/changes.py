"""Label changes: the unit of every write the lifecycle core asks for.

Both the operation-controller library (:mod:`lifecycle.operations`) and the state
machine (:mod:`lifecycle.advancing`) answer with "set these labels, remove those".
The I/O layer turns a :class:`LabelChange` into one JSON merge patch on
``metadata.labels``; passing the ``resourceVersion`` the decision was made from makes
the API server refuse the patch (409) when the pod changed in between, so a stale
decision fails instead of overwriting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True, kw_only=True)
class LabelChange:
    """Labels to set (key -> value) and labels to remove; the two never share a key."""

    set_labels: Mapping[str, str] = field(default_factory=dict)
    remove_labels: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        # Freeze the mapping so a change handed around cannot be edited behind our back.
        object.__setattr__(self, "set_labels", MappingProxyType(dict(self.set_labels)))
        object.__setattr__(self, "remove_labels", frozenset(self.remove_labels))
        both = set(self.set_labels) & self.remove_labels
        if both:
            raise ValueError(f"labels both set and removed: {sorted(both)}")

    @classmethod
    def between(cls, before: Mapping[str, str], after: Mapping[str, str]) -> LabelChange:
        """The change that turns ``before`` into ``after``."""
        return cls(
            set_labels={k: v for k, v in after.items() if before.get(k) != v},
            remove_labels=frozenset(k for k in before if k not in after),
        )

    @property
    def is_empty(self) -> bool:
        return not self.set_labels and not self.remove_labels

    def apply(self, labels: Mapping[str, str]) -> dict[str, str]:
        """A new label dict with this change applied to ``labels``."""
        result = {k: v for k, v in labels.items() if k not in self.remove_labels}
        result.update(self.set_labels)
        return result

    def then(self, other: LabelChange) -> LabelChange:
        """This change followed by ``other``, as one change."""
        set_labels = {k: v for k, v in self.set_labels.items() if k not in other.remove_labels}
        set_labels.update(other.set_labels)
        remove = (self.remove_labels - set(other.set_labels)) | other.remove_labels
        return LabelChange(set_labels=set_labels, remove_labels=remove)

    def to_merge_patch(self, *, resource_version: str | None = None) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386) body: ``None`` deletes a label.

        With ``resource_version`` the body also carries ``metadata.resourceVersion``,
        which the API server checks, answering 409 Conflict when the pod moved on.
        An empty change gives ``{}`` (nothing to send).
        """
        if self.is_empty:
            return {}
        labels: dict[str, str | None] = {k: None for k in sorted(self.remove_labels)}
        labels.update(dict(sorted(self.set_labels.items())))
        metadata: dict[str, Any] = {"labels": labels}
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        return {"metadata": metadata}

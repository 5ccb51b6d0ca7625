"""Building blocks for the API models (pydantic v2), shared by every CRD of the project.

The pydantic models are the one source of the API: the CRD generator
(``rollouts.crdgen``) turns their JSON schema into ``crds/*.yaml``. The types here
carry the Kubernetes schema extensions the generator keeps:

* :data:`IntOrString` -> ``x-kubernetes-int-or-string: true``;
* :data:`Unstructured` -> an object with ``x-kubernetes-preserve-unknown-fields: true``
  (pod templates and Job specs are validated by the API server when used, not by us).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

IntOrString = Annotated[
    int | str,
    WithJsonSchema({"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}),
]

Unstructured = Annotated[
    dict[str, Any],
    WithJsonSchema({"type": "object", "x-kubernetes-preserve-unknown-fields": True}),
]


class ApiModel(BaseModel):
    """Base of our API objects: immutable, camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        populate_by_name=True,
        alias_generator=to_camel,
    )

    def to_api(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optional fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class LabelSelectorRequirement(ApiModel):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[str] | None = None


class LabelSelector(ApiModel):
    """A metav1.LabelSelector; an empty selector selects everything."""

    match_labels: dict[str, str] | None = None
    match_expressions: list[LabelSelectorRequirement] | None = None

    def matches(self, labels: dict[str, str] | None) -> bool:
        """Whether ``labels`` satisfy every matchLabels entry and every expression."""
        labels = labels or {}
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        for req in self.match_expressions or []:
            present = req.key in labels
            values = req.values or []
            if req.operator == "In" and (not present or labels[req.key] not in values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True

    def is_empty(self) -> bool:
        return not self.match_labels and not self.match_expressions


class Condition(ApiModel):
    """A status condition in the metav1.Condition shape."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None
    observed_generation: int | None = None


def describe(text: str) -> Any:
    """A ``Field`` carrying a description that ends up in ``kubectl explain``."""
    return Field(default=None, description=text)

"""Validating and mutating admission for our own kinds: PodTransitionRule and CollaSet.

The CRD schema already rejects wrong types and enums; these handlers add the checks a
schema cannot express (unique names, one kind per rule, selector matching the template,
hook points within replicas ...). Every message names the field and the fix.
"""

from __future__ import annotations

from typing import Any, Literal

import kopf

from lifecycle.rules.validating import validate_rule_object
from rollouts.api.validating import default_collaset, validate_collaset
from rollouts.operator.handlers.indexes import GROUP, VERSION

WRITES: tuple[Literal["CREATE", "UPDATE"], ...] = ("CREATE", "UPDATE")


def _reject(errors: list[str]) -> None:
    if errors:
        raise kopf.AdmissionError("; ".join(errors), code=422)


def apply_add_operations(doc: Any, ops: list[dict[str, Any]]) -> None:
    """Apply RFC 6902 ``add`` operations in place (the only kind the defaulting emits)."""
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = doc
        for part in parts[:-1]:
            target = target[int(part)] if isinstance(target, list) else target[part]
        last = parts[-1]
        if isinstance(target, list):
            target.insert(len(target) if last == "-" else int(last), op["value"])
        else:
            target[last] = op["value"]


def register(registry: kopf.OperatorRegistry) -> None:
    @kopf.on.validate(
        GROUP,
        VERSION,
        "podtransitionrules",
        id="validate-podtransitionrule",
        operations=WRITES,
        registry=registry,
    )
    async def validate_podtransitionrule(body: kopf.Body, **_: Any) -> None:
        _reject(validate_rule_object(dict(body)))

    @kopf.on.mutate(GROUP, VERSION, "collasets", id="default-collaset", operations=WRITES, registry=registry)
    async def default_collaset_fields(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        ops = default_collaset(dict(body))
        if ops:
            # kopf diffs the transformed body into the JSON patch it returns to the API server.
            patch.fns.append(lambda raw: apply_add_operations(raw, ops))

    @kopf.on.validate(
        GROUP, VERSION, "collasets", id="validate-collaset", operations=WRITES, registry=registry
    )
    async def validate_collaset_object(body: kopf.Body, **_: Any) -> None:
        _reject(validate_collaset(dict(body)))

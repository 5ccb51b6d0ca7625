"""In-memory indexes fed by kopf's watches: what controllers observe instead of LISTing.

kopf keeps each index complete before handlers run and passes it to them as a keyword
argument named after the index function (``control_pods``, ``transition_rules``).
The index functions are ``async``: kopf runs sync handlers in a thread pool, and the
hand-off costs more than these copies do.
Bodies are stored without ``managedFields``, which can be most of a pod's size.

:data:`parse_rule` is the one parse of a PodTransitionRule from the index that both the rule
worker and the lifecycle controller use, once per rule version.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf
from pydantic import ValidationError

from lifecycle.labels import CONTROL, CONTROL_VALUE
from lifecycle.rules.models import PodTransitionRule
from rollouts.operator.caching import ByVersion

log = logging.getLogger("rollouts.transitionrules")

GROUP = "apps.kusionstack.io"
VERSION = "v1alpha1"


def snapshot(body: kopf.Body | dict[str, Any]) -> dict[str, Any]:
    """A plain copy of an object without managedFields."""
    raw = dict(body)
    meta = dict(raw.get("metadata") or {})
    meta.pop("managedFields", None)
    raw["metadata"] = meta
    return raw


@dataclass(frozen=True)
class ParsedRule:
    """A PodTransitionRule as parsed from its raw object."""

    #: None when the spec does not parse.
    rule: PodTransitionRule | None
    #: Why the spec does not parse ("" when it does).
    problem: str = ""
    #: The status did not parse and was left out (``rule.status`` is None).
    status_dropped: bool = False


def _parse_rule(raw: Mapping[str, Any]) -> ParsedRule:
    body = {key: raw[key] for key in ("apiVersion", "kind", "metadata", "spec", "status") if key in raw}
    try:
        return ParsedRule(PodTransitionRule.model_validate(body))
    except ValidationError:
        pass
    body.pop("status", None)
    meta = raw.get("metadata") or {}
    namespace, name = meta.get("namespace"), meta.get("name")
    try:
        rule = PodTransitionRule.model_validate(body)
    except ValidationError as invalid:
        problem = "; ".join(
            f"{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
            for error in invalid.errors(include_url=False)
        )
        log.warning("podtransitionrule %s/%s does not parse; ignored: %s", namespace, name, problem)
        return ParsedRule(None, problem)
    log.warning("podtransitionrule %s/%s: status does not parse; starting afresh", namespace, name)
    return ParsedRule(rule, status_dropped=True)


#: :func:`_parse_rule` once per rule version: a rule's status lists every pod of a rollout in a
#: stage, and each pod event and webhook call reads the rules of its namespace. One version per
#: rule is kept (keeping each would hold hundreds of megabytes in a 1,000-pod rollout).
parse_rule = ByVersion(_parse_rule)


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

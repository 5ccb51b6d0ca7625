"""Small label builders shared by the lifecycle unit tests (named uniquely: tests dirs have no __init__)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from lifecycle.advancing import LifecyclePatch, PodFacts
from lifecycle.labels import (
    AVAILABLE_CONDITIONS,
    CONTROL,
    CONTROL_VALUE,
    DONE_OPERATION_TYPE,
    OPERATION_TYPE,
    PROTECTION_FINALIZER_PREFIX,
    UNDO_OPERATION_TYPE,
    id_key,
    permission_key,
)

NOW = 1_717_505_885_197_871_195
#: Value of labels written "now" by the code under test.
T = str(NOW)
#: Value of labels already on the pod before the step under test.
OLD = "1402144848"

CONTROLLED = {CONTROL: CONTROL_VALUE}
TRAFFIC_FINALIZER = f"{PROTECTION_FINALIZER_PREFIX}/traffic"
#: Annotations expecting the traffic controller's finalizer.
EXPECT_TRAFFIC = {
    AVAILABLE_CONDITIONS: json.dumps({"expectedFinalizers": {"Service/ns/svc": TRAFFIC_FINALIZER}})
}

_TYPED = (OPERATION_TYPE, DONE_OPERATION_TYPE, UNDO_OPERATION_TYPE)


def op(op_id: str, *prefixes: str, t: str = "update", value: str = OLD) -> dict[str, str]:
    """Labels ``<prefix>/<op_id>``; type prefixes get ``t``, the others ``value``."""
    return {id_key(p, op_id): (t if p in _TYPED else value) for p in prefixes}


def perm(*types: str, value: str = OLD) -> dict[str, str]:
    return {permission_key(t): value for t in types}


def pod(*parts: Mapping[str, str]) -> dict[str, str]:
    """A controlled pod's labels made of ``parts``."""
    labels = dict(CONTROLLED)
    for part in parts:
        labels.update(part)
    return labels


def facts(labels: Mapping[str, str], **kwargs: Any) -> PodFacts:
    return PodFacts(labels=labels, **kwargs)


def applied(labels: Mapping[str, str], patch: LifecyclePatch) -> dict[str, str]:
    return patch.labels.apply(labels)

"""Finalizer facts the lifecycle gates on: protection finalizers and expected finalizers.

Cooperation controllers (traffic, monitoring) tell the lifecycle they are done in two
ways, both read here and nowhere else:

* a finalizer starting with ``prot.podopslifecycle.kusionstack.io`` means "I still have
  this pod in service": the state machine does not move a preparing pod to operate
  while one is present (``readyToOperate``);
* the annotation ``pod.kusionstack.io/available-conditions`` =
  ``{"expectedFinalizers": {"<key>": "<finalizer>"}}`` lists finalizers that must be on
  the pod before a finished lifecycle is cleaned up and before the pod is marked
  service-available.

The validating webhook (:mod:`lifecycle.validating`) reports a malformed annotation;
the state machine treats one as "not satisfied" so it never advances on garbage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Final

from lifecycle.labels import AVAILABLE_CONDITIONS, PROTECTION_FINALIZER_PREFIX

#: What the annotation must look like, quoted in error messages.
EXPECTED_SHAPE: Final = '{"expectedFinalizers": {"<key>": "<finalizer>"}}'


class AvailableConditionsError(ValueError):
    """The available-conditions annotation is not JSON of the expected shape."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"invalid annotation {AVAILABLE_CONDITIONS}: {detail}; expected JSON of the form {EXPECTED_SHAPE}"
        )
        self.detail = detail


def parse_expected_finalizers(annotations: Mapping[str, str] | None) -> dict[str, str]:
    """The ``expectedFinalizers`` map (key -> finalizer) of the pod; ``{}`` without the annotation.

    Raises :class:`AvailableConditionsError` saying what is wrong when the annotation is
    present but malformed (an empty value is malformed too, as in Operating).
    """
    raw = (annotations or {}).get(AVAILABLE_CONDITIONS)
    if raw is None:
        return {}
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise AvailableConditionsError(
            f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
        ) from None
    if document is None:
        return {}
    if not isinstance(document, dict):
        raise AvailableConditionsError(f"the top level must be a JSON object, got {_json_kind(document)}")
    expected = document.get("expectedFinalizers")
    if expected is None:
        return {}
    if not isinstance(expected, dict):
        raise AvailableConditionsError(
            f"expectedFinalizers must be a JSON object, got {_json_kind(expected)}"
        )
    result: dict[str, str] = {}
    for key, value in expected.items():
        if not isinstance(value, str):
            raise AvailableConditionsError(
                f"expectedFinalizers[{key!r}] must be a finalizer name (string), got {_json_kind(value)}"
            )
        result[key] = value
    return result


def missing_expected_finalizers(
    *, annotations: Mapping[str, str] | None, finalizers: Iterable[str]
) -> dict[str, str]:
    """Expected finalizers (key -> finalizer) not yet on the pod; ``{}`` means satisfied.

    Raises :class:`AvailableConditionsError` for a malformed annotation.
    """
    present = set(finalizers)
    return {k: v for k, v in parse_expected_finalizers(annotations).items() if v not in present}


def stale_service_keys(
    *,
    annotations: Mapping[str, str] | None,
    finalizers: Iterable[str],
    pod_labels: Mapping[str, str],
    service_selectors: Mapping[str, Mapping[str, str] | None],
) -> tuple[str, ...]:
    """Unsatisfied ``Service/<namespace>/<name>`` keys whose Service no longer selects the pod.

    A traffic controller will never add the finalizer of a Service that is gone or whose
    selector stopped matching the pod, so such keys would keep the pod from becoming
    service-available forever; the controller drops them from the annotation (see
    :func:`without_expected_finalizers`). ``service_selectors`` maps each key's
    ``<namespace>/<name>`` to the Service's ``spec.selector`` (``None`` or absent: the
    Service does not exist); the I/O layer looks them up.
    """
    stale = []
    for key in missing_expected_finalizers(annotations=annotations, finalizers=finalizers):
        kind, _, name = key.partition("/")
        if kind != "Service" or name.count("/") != 1:
            continue
        selector = service_selectors.get(name)
        if selector is None or any(pod_labels.get(k) != v for k, v in selector.items()):
            stale.append(key)
    return tuple(sorted(stale))


def without_expected_finalizers(annotations: Mapping[str, str] | None, keys: Iterable[str]) -> str:
    """The available-conditions annotation value with ``keys`` removed from ``expectedFinalizers``.

    Raises :class:`AvailableConditionsError` for a malformed annotation. Other fields of
    the document are kept.
    """
    expected = parse_expected_finalizers(annotations)  # validates the document first
    document = json.loads((annotations or {}).get(AVAILABLE_CONDITIONS) or "{}") or {}
    drop = set(keys)
    document["expectedFinalizers"] = {k: v for k, v in expected.items() if k not in drop}
    return json.dumps(document, sort_keys=True, separators=(",", ":"))


def protection_finalizers(finalizers: Iterable[str]) -> tuple[str, ...]:
    """The finalizers that hold the pod in service (prefix ``prot.podopslifecycle.kusionstack.io``)."""
    return tuple(sorted(f for f in finalizers if f.startswith(PROTECTION_FINALIZER_PREFIX)))


def _json_kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "null"

"""Admission rules of the CollaSet: defaulting and validation, pure functions over the raw object.

The admission webhook (in the rollouts I/O layer) calls :func:`default_collaset` for the
mutating pass and :func:`validate_collaset` for the validating pass and turns a non-empty
list of messages into a 422. The CRD schema already rejects wrong types and negative
numbers; these rules catch what a schema cannot say (duplicate hook names, a progress
point past 100% or past ``replicas``, a selector that does not match the template) and
repeat the structural checks so every message names the field and says how to fix it,
whichever layer answers first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from hooks.models import HookTriggerType, LifecycleHook, parse_percent
from rollouts.api.collasets import (
    DEFAULT_RULE_SUFFIX,
    MAX_RULE_NAME_LENGTH,
    CollaSet,
    CollaSetSpec,
    default_rule_name,
)

#: Revision names are ``<name>-<hash>`` (hash up to 10 characters) and go into label values (63).
MAX_NAME_LENGTH: Final = 52

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_UNION_TAGS: Final = frozenset({"int", "str", "bool", "float", "list", "dict", "none"})
_MISSING_HINTS: Final = {
    "jobSpec": "a hook runs a Job created from it: set a batch/v1 JobSpec with a pod template",
    "selector": "set matchLabels that the template's labels carry",
    "template": "set the pod template (metadata.labels and spec.containers)",
    "trigger": "set trigger.progressAvailableParams.progressPoint (e.g. '50%')",
    "progressPoint": "set a number of available new pods or a percentage like '50%'",
}


def validate_collaset(obj: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a CollaSet, one ``<field path>: <problem and fix>`` message each."""
    try:
        collaset = CollaSet.model_validate(obj)
    except ValidationError as error:
        return [_describe(detail) for detail in error.errors()]
    messages: list[str] = []
    name = collaset.metadata.get("name")
    if isinstance(name, str) and len(name) > MAX_NAME_LENGTH:
        messages.append(
            f"metadata.name: {len(name)} characters is too long; at most {MAX_NAME_LENGTH} so revision names "
            "(<name>-<hash>) fit a label value"
        )
    spec = collaset.spec
    if (
        isinstance(name, str)
        and spec.update_strategy.rolling_update.max_unavailable is not None
        and len(default_rule_name(name)) > MAX_RULE_NAME_LENGTH
    ):
        limit = MAX_RULE_NAME_LENGTH - len(DEFAULT_RULE_SUFFIX)
        messages.append(
            f"metadata.name: {len(name)} characters is too long with spec.updateStrategy.rollingUpdate."
            f"maxUnavailable; at most {limit} so the default PodTransitionRule {default_rule_name('<name>')} "
            "fits a pod annotation key (or set the budget with your own PodTransitionRule)"
        )
    messages += _check_selector(spec)
    messages += _check_template(spec.template)
    messages += _check_update_strategy(spec)
    messages += _check_hooks(spec)
    return messages


def _describe(detail: ErrorDetails) -> str:
    path = _path("", *(part for part in detail["loc"] if part not in _UNION_TAGS and "[" not in str(part)))
    kind = detail["type"]
    given = detail.get("input")
    if kind == "missing":
        last = str(detail["loc"][-1])
        hint = _MISSING_HINTS.get(last)
        return f"{path}: required" + (f"; {hint}" if hint else "")
    if kind == "greater_than_equal":
        return f"{path}: must be at least {detail.get('ctx', {}).get('ge')} (got {given!r})"
    if kind == "enum":
        return f"{path}: must be {detail.get('ctx', {}).get('expected')} (got {given!r})"
    if kind == "extra_forbidden":
        return f"{path}: unknown field; remove it (check the spelling against `kubectl explain cls.spec`)"
    return f"{path}: {detail['msg']} (got {given!r})"


def _path(base: str, *parts: object) -> str:
    text = base
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _check_selector(spec: CollaSetSpec) -> list[str]:
    if spec.selector.is_empty():
        return ["spec.selector: must not be empty; set matchLabels that spec.template.metadata.labels carry"]
    labels = (spec.template.get("metadata") or {}).get("labels") or {}
    if not isinstance(labels, dict) or not labels:
        return ["spec.template.metadata.labels: required; the selector must match them"]
    if not spec.selector.matches({str(k): str(v) for k, v in labels.items()}):
        return [
            "spec.selector: does not match spec.template.metadata.labels; add the selector's matchLabels "
            "to the template labels (or fix the selector)"
        ]
    return []


def _check_template(template: Mapping[str, Any]) -> list[str]:
    containers = (template.get("spec") or {}).get("containers")
    if not isinstance(containers, list) or not containers:
        return ["spec.template.spec.containers: required; a pod needs at least one container"]
    messages: list[str] = []
    seen: set[str] = set()
    for index, container in enumerate(containers):
        name = container.get("name") if isinstance(container, dict) else None
        if not name:
            messages.append(f"spec.template.spec.containers[{index}].name: required")
        elif name in seen:
            messages.append(f"spec.template.spec.containers[{index}].name: duplicate container name {name!r}")
        else:
            seen.add(str(name))
    return messages


def _check_update_strategy(spec: CollaSetSpec) -> list[str]:
    rolling = spec.update_strategy.rolling_update
    base = "spec.updateStrategy.rollingUpdate"
    messages: list[str] = []
    if rolling.by_partition is not None and rolling.by_label is not None:
        messages.append(f"{base}: set either byPartition or byLabel, not both")
    value = rolling.max_unavailable
    if value is None:
        return messages
    field = f"{base}.maxUnavailable"
    if isinstance(value, int):
        number = value
    else:
        percent = parse_percent(value)
        if percent is None:
            return [
                *messages,
                f"{field}: must be a number of pods or a percentage like '25%' (got {value!r})",
            ]
        if percent > 100:
            return [*messages, f"{field}: {value} is above 100%; use a percentage between 1% and 100%"]
        number = percent
    if number == 0:
        messages.append(
            f"{field}: must not be 0, which would block every update; set at least 1 or leave it unset"
        )
    elif number < 0:
        messages.append(f"{field}: must not be negative (got {value!r})")
    return messages


def _check_hooks(spec: CollaSetSpec) -> list[str]:
    messages: list[str] = []
    first_index: dict[str, int] = {}
    for index, hook in enumerate(spec.lifecycle_hooks):
        base = f"spec.lifecycleHooks[{index}]"
        if not _DNS_LABEL.match(hook.name):
            messages.append(
                f"{base}.name: {hook.name!r} is not a DNS label; use lowercase letters, digits and '-' "
                "(it names the hook's Job)"
            )
        if hook.name in first_index:
            messages.append(
                f"{base}.name: duplicate hook name {hook.name!r} "
                f"(also spec.lifecycleHooks[{first_index[hook.name]}]); hook names must be unique"
            )
        else:
            first_index[hook.name] = index
        messages += _check_trigger(hook, base=base, replicas=spec.replicas)
        messages += _check_job_spec(hook, base=f"{base}.jobSpec")
    return messages


def _check_trigger(hook: LifecycleHook, *, base: str, replicas: int) -> list[str]:
    params = hook.trigger.progress_available_params
    if hook.trigger.type == HookTriggerType.PROGRESS_AVAILABLE and params is None:
        return [
            f"{base}.trigger.progressAvailableParams: required for trigger type ProgressAvailable; "
            "set progressPoint (e.g. '50%')"
        ]
    if params is None:
        return []
    field = f"{base}.trigger.progressAvailableParams.progressPoint"
    point = params.progress_point
    if isinstance(point, str):
        pct = parse_percent(point)
        if pct is None:
            return [f"{field}: must be a number of pods or a percentage like '50%' (got {point!r})"]
        if pct > 100:
            return [f"{field}: {point} is above 100%; use a percentage between 0% and 100%"]
        return []
    if point < 0:
        return [f"{field}: must not be negative (got {point})"]
    if point > replicas:
        return [
            f"{field}: {point} is above spec.replicas ({replicas}); "
            f"use at most {replicas} or a percentage such as '100%'"
        ]
    return []


def _check_job_spec(hook: LifecycleHook, *, base: str) -> list[str]:
    pod_spec = (hook.job_spec.get("template") or {}).get("spec") or {}
    messages: list[str] = []
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        messages.append(
            f"{base}.template.spec.containers: required; the hook Job needs at least one container"
        )
    if pod_spec.get("restartPolicy") == "Always":
        messages.append(
            f"{base}.template.spec.restartPolicy: a Job's pods need Never or OnFailure, not Always"
        )
    deadline = hook.job_spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or isinstance(deadline, bool) or deadline < 1):
        messages.append(
            f"{base}.activeDeadlineSeconds: must be a positive number of seconds (got {deadline!r})"
        )
    return messages


def default_collaset(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON patch operations (RFC 6902 ``add``) filling the spec's defaults the user left out.

    The CRD schema defaults only fields of objects that are present; this fills nested
    ones too (``updateStrategy.podUpdatePolicy``, each hook's policies and deadline), so
    what is stored is what the controller acts on. Existing values are never touched, and
    an object that does not parse gets no patch (validation reports it).
    """
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return []
    try:
        defaulted = CollaSetSpec.model_validate(spec).model_dump(
            by_alias=True, exclude_none=True, mode="json"
        )
    except ValidationError:
        return []
    return _additions(spec, defaulted, "/spec")


def _additions(given: Mapping[str, Any], full: Mapping[str, Any], pointer: str) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for key, value in full.items():
        child = f"{pointer}/{key.replace('~', '~0').replace('/', '~1')}"
        if key not in given:
            if value not in ([], {}):  # empty defaults add nothing
                ops.append({"op": "add", "path": child, "value": value})
            continue
        current = given[key]
        if isinstance(current, Mapping) and isinstance(value, Mapping):
            ops += _additions(current, value, child)
        elif isinstance(current, list) and isinstance(value, list) and len(current) == len(value):
            for index, (item, full_item) in enumerate(zip(current, value, strict=True)):
                if isinstance(item, Mapping) and isinstance(full_item, Mapping):
                    ops += _additions(item, full_item, f"{child}/{index}")
    return ops

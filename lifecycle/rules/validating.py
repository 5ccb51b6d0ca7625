"""Admission checks for PodTransitionRule objects: messages that name the offending field.

Called by the validating admission webhook (CREATE and UPDATE) with the object under review.
The CRD schema already refuses some of these (missing selector, unknown stage, unknown
fields); the webhook repeats them so every message has the same ``<field path>: <problem>``
form, e.g. ``spec.rules[1].name: duplicate rule name "budget"; rule names must be unique``.

Two layers: the pydantic model (:class:`~lifecycle.rules.models.PodTransitionRuleSpec`) and its
validators, whose errors are turned into field paths here; then checks that only matter at
admission (unique rule and parameter names, URLs, CA bundles, field paths). URLs are parsed,
never dialled: a webhook server being down at admission time says nothing about the rule.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from lifecycle.rules.models import PodTransitionRuleSpec
from lifecycle.rules.webhooks import FieldPathError, decode_ca_bundle, parse_field_path

# pydantic names the branch of a union (int | str) in the error location; they are no fields
_UNION_TAGS: Final = frozenset({"int", "str", "bool", "float", "list", "dict"})

_HINTS: Final[Mapping[tuple[str, str], str]] = {
    ("spec.selector", "missing"): "required: a PodTransitionRule must select the pods its rules gate",
    ("spec.rules[].name", "missing"): "required: every rule needs a name",
    ("spec.rules[].name", "string_too_short"): "must not be empty: every rule needs a name",
}


def _path(loc: Sequence[str | int]) -> tuple[str, bool]:
    """A dotted path with [i] indices, and whether the location went through a union branch."""
    text = ""
    union = False
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part in _UNION_TAGS or "[" in part:
            union = True
        else:
            text += f".{part}" if text else part
    return text, union


def _generic(path: str) -> str:
    out = []
    depth = 0
    for char in path:
        if char == "[":
            depth += 1
            out.append("[]")
        elif char == "]":
            depth -= 1
        elif depth == 0:
            out.append(char)
    return "".join(out)


def _describe(error: ErrorDetails, path: str) -> str:
    kind = error["type"]
    hint = _HINTS.get((_generic(path), kind))
    if hint is not None:
        return hint
    ctx = error.get("ctx") or {}
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind in ("tuple_type", "list_type"):
        return "must be a list"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("enum", "literal_error"):
        return f"unsupported value {error['input']!r}: must be one of {ctx.get('expected')}"
    if kind in ("model_type", "model_attributes_type", "dict_type") and error["input"] is None:
        return "required (got null)"
    if kind == "value_error":
        return str(error["msg"]).removeprefix("Value error, ")
    return str(error["msg"])


def _model_errors(spec: Any) -> list[str]:
    try:
        PodTransitionRuleSpec.model_validate(spec)
    except ValidationError as invalid:
        messages = []
        for error in invalid.errors(include_url=False):
            path, union = _path(("spec", *error["loc"]))
            if union:
                messages.append(f"{path}: must be an integer or a string like 50%")
            else:
                messages.append(f"{path}: {_describe(error, path)}")
        return messages
    return []


def check_url(url: str) -> str | None:
    """Why ``url`` cannot be a webhook URL (http or https with a host), or None."""
    if any(char.isspace() for char in url):
        return f"invalid URL {url!r}: it must not contain whitespace"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"invalid URL {url!r}: {error}"
    if parts.scheme not in ("http", "https"):
        return f"invalid URL {url!r}: the scheme must be http or https"
    if not parts.hostname:
        return f"invalid URL {url!r}: it has no host"
    if port == 0:
        return f"invalid URL {url!r}: port 0"
    if parts.username is not None or parts.password is not None:
        return f"invalid URL {url!r}: it must not carry user info"
    if parts.fragment:
        return f"invalid URL {url!r}: it must not have a fragment"
    return None


def check_ca_bundle(ca_bundle: str) -> str | None:
    """Why ``ca_bundle`` is not base64 of PEM certificates, or None ("" and ``Cg==`` mean none)."""
    try:
        decode_ca_bundle(ca_bundle)
    except ValueError as error:
        return f"invalid caBundle: {error}"
    return None


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _webhook_errors(webhook: Mapping[str, Any], path: str) -> list[str]:
    messages = []
    client = _as_map(webhook.get("clientConfig"))
    poll = _as_map(client.get("poll"))
    targets = (
        (f"{path}.clientConfig", client),
        (f"{path}.clientConfig.poll", poll),
    )
    for where, config in targets:
        url = config.get("url")
        if isinstance(url, str) and url and (problem := check_url(url)) is not None:
            messages.append(f"{where}.url: {problem}")
        bundle = config.get("caBundle")
        if isinstance(bundle, str) and (problem := check_ca_bundle(bundle)) is not None:
            messages.append(f"{where}.caBundle: {problem}")
    seen: dict[str, int] = {}
    for index, parameter in enumerate(_as_list(webhook.get("parameters"))):
        parameter = _as_map(parameter)
        where = f"{path}.parameters[{index}]"
        key = parameter.get("key")
        if isinstance(key, str) and key:
            if key in seen:
                messages.append(
                    f"{where}.key: duplicate parameter key {key!r} (also parameters[{seen[key]}]); "
                    "keys must be unique"
                )
            seen.setdefault(key, index)
        field_path = _as_map(_as_map(parameter.get("valueFrom")).get("fieldRef")).get("fieldPath")
        if isinstance(field_path, str) and field_path:
            try:
                parse_field_path(field_path)
            except FieldPathError as error:
                messages.append(f"{where}.valueFrom.fieldRef.fieldPath: {error}")
    return messages


def _admission_errors(spec: Mapping[str, Any]) -> list[str]:
    messages = []
    seen: dict[str, int] = {}
    for index, rule in enumerate(_as_list(spec.get("rules"))):
        rule = _as_map(rule)
        path = f"spec.rules[{index}]"
        name = rule.get("name")
        if isinstance(name, str) and name:
            if name in seen:
                messages.append(
                    f'{path}.name: duplicate rule name "{name}" (also spec.rules[{seen[name]}]); '
                    "rule names must be unique"
                )
            seen.setdefault(name, index)
        webhook = rule.get("webhook")
        if isinstance(webhook, Mapping):
            messages.extend(_webhook_errors(webhook, f"{path}.webhook"))
    return messages


def validate_rule_object(obj: Mapping[str, Any]) -> list[str]:
    """Everything wrong with a PodTransitionRule object (the whole object, as admission gets it).

    Returns ``<field path>: <problem>`` messages, empty when the object is fine. Only
    ``spec`` is checked: status is the controller's, metadata the API server's.
    """
    if not isinstance(obj, Mapping):
        return ["object: must be a JSON object"]
    spec = obj.get("spec")
    if spec is None:
        return ["spec: required: a PodTransitionRule needs a spec with a selector and rules"]
    if not isinstance(spec, Mapping):
        return ["spec: must be an object"]
    messages = _model_errors(spec) + _admission_errors(spec)
    return list(dict.fromkeys(messages))

"""Admission of PodTransitionRule objects: every rejection, with a message naming the field."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from typing import Any

import pytest

from lifecycle.rules.validating import check_url, validate_rule_object

from .tls import make_ca

Edit = Callable[[dict[str, Any]], None]

CA_BUNDLE = make_ca("validating-test-ca").ca_bundle()


def base() -> dict[str, Any]:
    return {
        "apiVersion": "apps.kusionstack.io/v1alpha1",
        "kind": "PodTransitionRule",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": "foo"}},
            "rules": [
                {"name": "budget", "availablePolicy": {"maxUnavailableValue": "50%"}},
                {"name": "labels", "labelCheck": {"requires": {"matchLabels": {"a": "b"}}}},
                {
                    "name": "hook",
                    "stage": "PostCheck",
                    "webhook": {
                        "clientConfig": {
                            "url": "https://hook.example:8443/check",
                            "poll": {"url": "http://hook.example/poll"},
                        },
                        "parameters": [
                            {"key": "podIP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
                        ],
                    },
                },
            ],
        },
    }


def _parent(spec: dict[str, Any], path: tuple[str | int, ...]) -> Any:
    node: Any = spec
    for part in path[:-1]:
        node = node[part]
    return node


def setting(path: tuple[str | int, ...], value: Any) -> Edit:
    def edit(spec: dict[str, Any]) -> None:
        _parent(spec, path)[path[-1]] = value

    return edit


def deleting(path: tuple[str | int, ...]) -> Edit:
    def edit(spec: dict[str, Any]) -> None:
        del _parent(spec, path)[path[-1]]

    return edit


def both(*edits: Edit) -> Edit:
    def edit(spec: dict[str, Any]) -> None:
        for one in edits:
            one(spec)

    return edit


MAX = ("rules", 0, "availablePolicy", "maxUnavailableValue")
HOOK = ("rules", 2, "webhook")
CLIENT = (*HOOK, "clientConfig")
POLICY_PATH = "spec.rules[0].availablePolicy"
CLIENT_PATH = "spec.rules[2].webhook.clientConfig"


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(
            deleting(("selector",)),
            ["spec.selector: required: a PodTransitionRule must select the pods its rules gate"],
            id="missing-selector",
        ),
        pytest.param(
            setting(("selector",), None), ["spec.selector: required (got null)"], id="null-selector"
        ),
        pytest.param(
            deleting(("rules", 0, "name")),
            ["spec.rules[0].name: required: every rule needs a name"],
            id="unnamed-rule",
        ),
        pytest.param(
            setting(("rules", 0, "name"), ""),
            ["spec.rules[0].name: must not be empty: every rule needs a name"],
            id="empty-rule-name",
        ),
        pytest.param(
            setting(("rules", 1, "name"), "budget"),
            [
                'spec.rules[1].name: duplicate rule name "budget" (also spec.rules[0]); rule names must be '
                "unique"
            ],
            id="duplicate-rule-name",
        ),
        pytest.param(
            setting(("rules", 0), {"name": "budget"}),
            ["spec.rules[0]: a rule needs exactly one of availablePolicy, labelCheck, webhook; found none"],
            id="rule-without-kind",
        ),
        pytest.param(
            setting(("rules", 0, "labelCheck"), {"requires": {}}),
            [
                "spec.rules[0]: a rule needs exactly one of availablePolicy, labelCheck, webhook; "
                "found availablePolicy and labelCheck"
            ],
            id="rule-with-two-kinds",
        ),
        pytest.param(
            setting(MAX, "50.5%"),
            [
                f"{POLICY_PATH}.maxUnavailableValue: '50.5%' is not a valid value: use an integer or a whole "
                "percentage like 50%"
            ],
            id="fractional-percentage",
        ),
        pytest.param(
            setting(MAX, "150%"),
            [
                f"{POLICY_PATH}.maxUnavailableValue: '150%' is not a valid percentage: it must be between "
                "0% and 100%"
            ],
            id="percentage-over-100",
        ),
        pytest.param(
            setting(MAX, "5"),
            [
                f"{POLICY_PATH}.maxUnavailableValue: '5' is not a valid value: use an integer or a whole "
                "percentage like 50%"
            ],
            id="number-as-string",
        ),
        pytest.param(
            setting(MAX, True),
            [
                f"{POLICY_PATH}.maxUnavailableValue: True is not a valid value: use an integer or a whole "
                "percentage like 50%"
            ],
            id="boolean-budget",
        ),
        pytest.param(
            setting(MAX, [1]),
            [f"{POLICY_PATH}.maxUnavailableValue: must be an integer or a string like 50%"],
            id="list-budget",
        ),
        pytest.param(
            setting(("rules", 0, "availablePolicy"), {"minAvailableValue": -1}),
            [
                f"{POLICY_PATH}.minAvailableValue: -1 is negative: use a non-negative integer or a "
                "percentage like 50%"
            ],
            id="negative-min-available",
        ),
        pytest.param(
            setting(("rules", 0, "availablePolicy"), {"minAvailable": {"value": "half"}}),
            [
                f"{POLICY_PATH}.minAvailable.value: 'half' is not a valid value: use an integer or a whole "
                "percentage like 50%"
            ],
            id="bad-nested-min-available",
        ),
        pytest.param(
            setting(MAX, 0),
            [
                f"{POLICY_PATH}.maxUnavailableValue: must not be 0: a max unavailable budget of 0 would "
                "block every pod"
            ],
            id="max-unavailable-0",
        ),
        pytest.param(
            setting(MAX, "0%"),
            [
                f"{POLICY_PATH}.maxUnavailableValue: must not be 0: a max unavailable budget of 0 would "
                "block every pod"
            ],
            id="max-unavailable-0-percent",
        ),
        pytest.param(
            setting(("rules", 0, "availablePolicy"), {"maxUnavailable": {"value": 0}}),
            [
                f"{POLICY_PATH}.maxUnavailable.value: must not be 0: a max unavailable budget of 0 would "
                "block "
                "every pod"
            ],
            id="nested-max-unavailable-0",
        ),
        pytest.param(
            setting(
                ("rules", 0, "availablePolicy"), {"maxUnavailableValue": 1, "maxUnavailable": {"value": 2}}
            ),
            [
                f"{POLICY_PATH}: maxUnavailableValue and maxUnavailable.value are two spellings of one "
                "field: "
                "set only one"
            ],
            id="both-spellings",
        ),
        pytest.param(
            setting(("rules", 0, "availablePolicy"), {}),
            [
                f"{POLICY_PATH}: set at least one of maxUnavailableValue (or maxUnavailable.value) and "
                "minAvailableValue"
            ],
            id="empty-available-policy",
        ),
        pytest.param(
            setting(("rules", 0, "stage"), "Precheck"),
            ["spec.rules[0].stage: unsupported value 'Precheck': must be one of 'PreCheck' or 'PostCheck'"],
            id="unknown-stage",
        ),
        pytest.param(
            deleting(("rules", 1, "labelCheck", "requires")),
            ["spec.rules[1].labelCheck.requires: required"],
            id="label-check-without-requires",
        ),
        pytest.param(
            setting(
                ("rules", 1, "labelCheck", "requires", "matchExpressions"), [{"key": "k", "operator": "Has"}]
            ),
            [
                "spec.rules[1].labelCheck.requires.matchExpressions[0].operator: unsupported value 'Has': "
                "must be "
                "one of 'In', 'NotIn', 'Exists' or 'DoesNotExist'"
            ],
            id="bad-selector-operator",
        ),
        pytest.param(
            setting(("rules", 0, "bogus"), 1), ["spec.rules[0].bogus: unknown field"], id="unknown-field"
        ),
        pytest.param(setting(("rules",), {"a": 1}), ["spec.rules: must be a list"], id="rules-not-a-list"),
        pytest.param(
            setting((*CLIENT, "url"), "ftp://hook.example/check"),
            [f"{CLIENT_PATH}.url: invalid URL 'ftp://hook.example/check': the scheme must be http or https"],
            id="url-bad-scheme",
        ),
        pytest.param(
            setting((*CLIENT, "url"), "hook.example/check"),
            [f"{CLIENT_PATH}.url: invalid URL 'hook.example/check': the scheme must be http or https"],
            id="url-without-scheme",
        ),
        pytest.param(
            setting((*CLIENT, "url"), "https:///check"),
            [f"{CLIENT_PATH}.url: invalid URL 'https:///check': it has no host"],
            id="url-without-host",
        ),
        pytest.param(
            setting((*CLIENT, "url"), "https://hook.example:99999/"),
            [f"{CLIENT_PATH}.url: invalid URL 'https://hook.example:99999/': Port out of range 0-65535"],
            id="url-bad-port",
        ),
        pytest.param(
            setting((*CLIENT, "url"), "https://hook example/"),
            [f"{CLIENT_PATH}.url: invalid URL 'https://hook example/': it must not contain whitespace"],
            id="url-with-space",
        ),
        pytest.param(
            setting((*CLIENT, "url"), ""), [f"{CLIENT_PATH}.url: must not be empty"], id="url-empty"
        ),
        pytest.param(
            setting((*CLIENT, "poll", "url"), "http://"),
            [f"{CLIENT_PATH}.poll.url: invalid URL 'http://': it has no host"],
            id="poll-url-without-host",
        ),
        pytest.param(
            setting((*CLIENT, "caBundle"), "!!not base64"),
            [f"{CLIENT_PATH}.caBundle: invalid caBundle: not valid base64 (*"],
            id="ca-bundle-not-base64",
        ),
        pytest.param(
            setting((*CLIENT, "caBundle"), base64.b64encode(b"hello").decode()),
            [f"{CLIENT_PATH}.caBundle: invalid caBundle: must be base64 of PEM certificates, but *"],
            id="ca-bundle-not-pem",
        ),
        pytest.param(
            setting((*CLIENT, "poll", "caBundle"), base64.b64encode(b"hello").decode()),
            [f"{CLIENT_PATH}.poll.caBundle: invalid caBundle: must be base64 of PEM certificates, but *"],
            id="poll-ca-bundle-not-pem",
        ),
        pytest.param(
            setting((*HOOK, "failurePolicy"), "Never"),
            [
                "spec.rules[2].webhook.failurePolicy: unsupported value 'Never': must be one of 'Ignore' "
                "or 'Fail'"
            ],
            id="unknown-failure-policy",
        ),
        pytest.param(
            setting((*CLIENT, "poll", "intervalSeconds"), 0),
            [f"{CLIENT_PATH}.poll.intervalSeconds: Input should be greater than or equal to 1"],
            id="poll-interval-0",
        ),
        pytest.param(
            setting((*HOOK, "parameters", 0), {"key": "podIP"}),
            ["spec.rules[2].webhook.parameters[0]: set value or valueFrom.fieldRef.fieldPath"],
            id="parameter-without-value",
        ),
        pytest.param(
            setting((*HOOK, "parameters", 0, "valueFrom", "fieldRef", "fieldPath"), "status..podIP"),
            [
                "spec.rules[2].webhook.parameters[0].valueFrom.fieldRef.fieldPath: cannot parse field path "
                "'status..podIP' at position 6"
            ],
            id="parameter-bad-field-path",
        ),
        pytest.param(
            setting((*HOOK, "parameters"), [{"key": "podIP", "value": "a"}, {"key": "podIP", "value": "b"}]),
            [
                "spec.rules[2].webhook.parameters[1].key: duplicate parameter key 'podIP' (also "
                "parameters[0]); "
                "keys must be unique"
            ],
            id="parameter-duplicate-key",
        ),
        pytest.param(
            both(deleting(("selector",)), setting(("rules", 2, "name"), "labels")),
            [
                "spec.selector: required: a PodTransitionRule must select the pods its rules gate",
                'spec.rules[2].name: duplicate rule name "labels" (also spec.rules[1]); rule names must be '
                "unique",
            ],
            id="several-problems-at-once",
        ),
    ],
)
def test_rejections_name_the_field(edit: Edit, expected: list[str]) -> None:
    obj = base()
    edit(obj["spec"])

    messages = validate_rule_object(obj)

    assert len(messages) == len(expected), messages
    for message, want in zip(messages, expected, strict=True):
        if want.endswith("*"):
            assert message.startswith(want[:-1]), message
        else:
            assert message == want


@pytest.mark.parametrize(
    "edit",
    [
        pytest.param(lambda spec: None, id="as-is"),
        pytest.param(setting((*CLIENT, "caBundle"), "Cg=="), id="ca-bundle-newline-means-none"),
        pytest.param(setting((*CLIENT, "caBundle"), ""), id="ca-bundle-empty"),
        pytest.param(setting((*CLIENT, "caBundle"), CA_BUNDLE), id="ca-bundle-pem"),
        pytest.param(setting((*CLIENT, "url"), "http://127.0.0.1:1/never-dialled"), id="unreachable-url"),
        pytest.param(setting((*CLIENT, "poll", "url"), "http://hook.example/poll?x=1"), id="poll-url-query"),
        pytest.param(setting(("selector",), {}), id="empty-selector-selects-all"),
        pytest.param(setting(("rules",), []), id="no-rules"),
        pytest.param(setting(MAX, 100), id="max-over-total"),
        pytest.param(
            setting(("rules", 0, "availablePolicy"), {"minAvailableValue": "0%"}), id="min-0-percent"
        ),
        pytest.param(setting(("rules", 0, "disabled"), True), id="disabled"),
        pytest.param(
            setting(("rules", 0, "filter"), {"labelSelector": {"matchLabels": {"x": "y"}}}), id="filter"
        ),
        pytest.param(
            setting((*HOOK, "parameters", 0, "valueFrom", "fieldRef", "fieldPath"), "metadata.labels['a/b']"),
            id="field-path-label",
        ),
    ],
)
def test_valid_objects_pass(edit: Edit) -> None:
    obj = base()
    edit(obj["spec"])
    assert validate_rule_object(copy.deepcopy(obj)) == []


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            {"metadata": {}},
            ["spec: required: a PodTransitionRule needs a spec with a selector and rules"],
            id="no-spec",
        ),
        pytest.param({"spec": []}, ["spec: must be an object"], id="spec-not-object"),
    ],
)
def test_object_level_rejections(obj: dict[str, Any], expected: list[str]) -> None:
    assert validate_rule_object(obj) == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        pytest.param("https://1.1.1.1:8089/post-stop", None, id="seed-url"),
        pytest.param("http://[::1]:8080/x", None, id="ipv6"),
        pytest.param(
            "https://user:pw@hook.example/",
            "invalid URL 'https://user:pw@hook.example/': it must not carry user info",
            id="user-info",
        ),
        pytest.param(
            "https://hook.example/#frag",
            "invalid URL 'https://hook.example/#frag': it must not have a fragment",
            id="fragment",
        ),
        pytest.param("https://hook.example:0/", "invalid URL 'https://hook.example:0/': port 0", id="port-0"),
    ],
)
def test_check_url(url: str, problem: str | None) -> None:
    assert check_url(url) == problem

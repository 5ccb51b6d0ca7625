"""The validating webhook's checks (ref. §2.5) with messages that say what to fix."""

from __future__ import annotations

import pytest

from lifecycle.labels import (
    AVAILABLE_CONDITIONS,
    COMPLETING,
    DONE_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_PERMISSION,
    OPERATION_TYPE,
    PRE_CHECK,
    PRE_CHECKED,
    UNDO_OPERATION_TYPE,
)
from lifecycle.validating import validate

from .lifecycle_builders import EXPECT_TRAFFIC, op, perm, pod


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        pytest.param(pod(), {}, id="plain-pod"),
        pytest.param(None, None, id="nothing"),
        pytest.param(pod(op("123", OPERATING, OPERATION_TYPE)), {}, id="id-labels"),
        pytest.param(pod(op("123", OPERATING)), {}, id="lone-operating"),
        pytest.param(pod(op("123", OPERATION_TYPE)), {}, id="lone-operation-type"),
        pytest.param(
            pod(op("123", OPERATING, OPERATION_TYPE, PRE_CHECKED), perm("update")), {}, id="pre-checked-perm"
        ),
        pytest.param(
            pod(op("123", OPERATED, DONE_OPERATION_TYPE, COMPLETING)), {}, id="operated-with-done-type"
        ),
        pytest.param(pod(op("123", OPERATING, UNDO_OPERATION_TYPE, OPERATE)), {}, id="undo"),
        pytest.param(pod(), EXPECT_TRAFFIC, id="expected-finalizers"),
        pytest.param(pod(), {AVAILABLE_CONDITIONS: "{}"}, id="empty-conditions"),
        pytest.param(pod(), {AVAILABLE_CONDITIONS: "null"}, id="null-conditions"),
        pytest.param(pod(), {AVAILABLE_CONDITIONS: '{"expectedFinalizers": null}'}, id="null-finalizers"),
        pytest.param(pod(), {AVAILABLE_CONDITIONS: '{"other": 1}'}, id="unknown-fields-ignored"),
    ],
)
def test_valid(labels: dict[str, str] | None, annotations: dict[str, str] | None) -> None:
    assert validate(labels, annotations) == []


@pytest.mark.parametrize(
    ("labels", "annotations", "messages"),
    [
        pytest.param(
            pod({OPERATING: "1", f"{OPERATION_TYPE}/123": "update"}),
            {},
            [f"invalid label {OPERATING}: lifecycle labels are keyed <prefix>/<operation id>"],
            id="operating-without-id",
        ),
        pytest.param(
            pod({PRE_CHECK: "1"}),
            {},
            [f"invalid label {PRE_CHECK}: "],
            id="pre-check-without-id",
        ),
        pytest.param(
            pod({OPERATION_PERMISSION: "1"}),
            {},
            [f"invalid label {OPERATION_PERMISSION}: "],
            id="permission-without-type",
        ),
        pytest.param(
            pod(op("123", OPERATED)),
            {},
            [f"not found label {DONE_OPERATION_TYPE}/123: {OPERATED}/123 is present"],
            id="operated-without-done-type",
        ),
        pytest.param(
            pod(op("123", DONE_OPERATION_TYPE)),
            {},
            [f"not found label {OPERATED}/123: {DONE_OPERATION_TYPE}/123 is present"],
            id="done-type-without-operated",
        ),
        pytest.param(
            pod(op("123", OPERATING, OPERATION_TYPE, PRE_CHECKED)),
            {},
            [f"not found the expected label prefix {OPERATION_PERMISSION}: ['{PRE_CHECKED}/123'] present"],
            id="pre-checked-without-permission",
        ),
        pytest.param(
            pod(op("123", OPERATING, OPERATION_TYPE), perm("update")),
            {},
            [f"not found the expected label prefix {PRE_CHECKED}: ['{OPERATION_PERMISSION}/update'] present"],
            id="permission-without-pre-checked",
        ),
        pytest.param(
            pod(),
            {AVAILABLE_CONDITIONS: "{not json"},
            [f"invalid annotation {AVAILABLE_CONDITIONS}: not valid JSON"],
            id="conditions-not-json",
        ),
        pytest.param(
            pod(),
            {AVAILABLE_CONDITIONS: ""},
            [f"invalid annotation {AVAILABLE_CONDITIONS}: not valid JSON"],
            id="conditions-empty-string",
        ),
        pytest.param(
            pod(),
            {AVAILABLE_CONDITIONS: "[]"},
            [f"invalid annotation {AVAILABLE_CONDITIONS}: the top level must be a JSON object, got an array"],
            id="conditions-array",
        ),
        pytest.param(
            pod(),
            {AVAILABLE_CONDITIONS: '{"expectedFinalizers": ["a"]}'},
            [
                f"invalid annotation {AVAILABLE_CONDITIONS}: "
                "expectedFinalizers must be a JSON object, got an array"
            ],
            id="expected-finalizers-array",
        ),
        pytest.param(
            pod(),
            {AVAILABLE_CONDITIONS: '{"expectedFinalizers": {"k": 1}}'},
            [f"invalid annotation {AVAILABLE_CONDITIONS}: expectedFinalizers['k'] must be a finalizer name"],
            id="expected-finalizer-not-string",
        ),
        pytest.param(
            pod({OPERATING: "1"}, op("a", OPERATED), op("b", OPERATED)),
            {AVAILABLE_CONDITIONS: "x"},
            [
                f"invalid annotation {AVAILABLE_CONDITIONS}",
                f"invalid label {OPERATING}",
                f"not found label {DONE_OPERATION_TYPE}/a",
                f"not found label {DONE_OPERATION_TYPE}/b",
            ],
            id="every-problem-reported",
        ),
    ],
)
def test_invalid(labels: dict[str, str], annotations: dict[str, str], messages: list[str]) -> None:
    errors = validate(labels, annotations)
    assert len(errors) == len(messages), errors
    for error, expected in zip(errors, messages, strict=True):
        assert error.startswith(expected), error


def test_messages_say_what_to_fix() -> None:
    [json_error] = validate(pod(), {AVAILABLE_CONDITIONS: "[]"})
    assert '{"expectedFinalizers": {"<key>": "<finalizer>"}}' in json_error
    [pair_error] = validate(pod(op("1", OPERATED)), {})
    assert f"add {DONE_OPERATION_TYPE}/1 or remove {OPERATED}/1" in pair_error

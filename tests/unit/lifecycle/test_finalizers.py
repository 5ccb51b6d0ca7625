"""Finalizer facts: expected finalizers (annotation), protection finalizers, stale Service keys."""

from __future__ import annotations

import json

import pytest

from lifecycle.finalizers import (
    AvailableConditionsError,
    missing_expected_finalizers,
    parse_expected_finalizers,
    protection_finalizers,
    stale_service_keys,
    without_expected_finalizers,
)
from lifecycle.labels import AVAILABLE_CONDITIONS

from .lifecycle_builders import TRAFFIC_FINALIZER


def conditions(expected: dict[str, str], **extra: object) -> dict[str, str]:
    return {AVAILABLE_CONDITIONS: json.dumps({"expectedFinalizers": expected, **extra})}


@pytest.mark.parametrize(
    ("annotations", "finalizers", "missing"),
    [
        pytest.param(None, set(), {}, id="no-annotation-satisfied"),
        pytest.param(conditions({}), set(), {}, id="empty-satisfied"),
        pytest.param(conditions({"Service/ns/a": "f-a"}), {"f-a"}, {}, id="present"),
        pytest.param(conditions({"Service/ns/a": "f-a"}), set(), {"Service/ns/a": "f-a"}, id="missing"),
        pytest.param(
            conditions({"Service/ns/a": "f-a", "Service/ns/b": "f-b"}),
            {"f-b", "other"},
            {"Service/ns/a": "f-a"},
            id="one-of-two-missing",
        ),
    ],
)
def test_missing_expected_finalizers(
    annotations: dict[str, str] | None, finalizers: set[str], missing: dict[str, str]
) -> None:
    assert missing_expected_finalizers(annotations=annotations, finalizers=finalizers) == missing


def test_malformed_annotation_raises_with_shape() -> None:
    with pytest.raises(AvailableConditionsError, match="expectedFinalizers"):
        parse_expected_finalizers({AVAILABLE_CONDITIONS: "1"})


@pytest.mark.parametrize(
    ("finalizers", "expected"),
    [
        pytest.param(set(), (), id="none"),
        pytest.param({"example.io/x"}, (), id="other"),
        pytest.param({TRAFFIC_FINALIZER, "example.io/x"}, (TRAFFIC_FINALIZER,), id="prot"),
        pytest.param(
            {"prot.podopslifecycle.kusionstack.io-legacy"},
            ("prot.podopslifecycle.kusionstack.io-legacy",),
            id="prefix",
        ),
    ],
)
def test_protection_finalizers(finalizers: set[str], expected: tuple[str, ...]) -> None:
    assert protection_finalizers(finalizers) == expected


POD_LABELS = {"app": "web"}


@pytest.mark.parametrize(
    ("selectors", "finalizers", "stale"),
    [
        pytest.param({"ns/svc": {"app": "web"}}, set(), (), id="selector-matches-not-dirty"),
        pytest.param({"ns/svc": {"app": "db"}}, set(), ("Service/ns/svc",), id="selector-mismatch-dirty"),
        pytest.param({}, set(), ("Service/ns/svc",), id="service-missing-dirty"),
        pytest.param({"ns/svc": None}, set(), ("Service/ns/svc",), id="service-none-dirty"),
        pytest.param({}, {"f-svc"}, (), id="satisfied-keys-never-dirty"),
    ],
)
def test_stale_service_keys(
    selectors: dict[str, dict[str, str] | None], finalizers: set[str], stale: tuple[str, ...]
) -> None:
    annotations = conditions({"Service/ns/svc": "f-svc", "Custom/x": "f-x"})
    found = stale_service_keys(
        annotations=annotations, finalizers=finalizers, pod_labels=POD_LABELS, service_selectors=selectors
    )
    assert found == stale


def test_without_expected_finalizers_keeps_other_fields() -> None:
    annotations = conditions({"Service/ns/svc": "f-svc", "Custom/x": "f-x"}, other=1)
    value = without_expected_finalizers(annotations, ["Service/ns/svc"])
    assert json.loads(value) == {"expectedFinalizers": {"Custom/x": "f-x"}, "other": 1}
    assert json.loads(without_expected_finalizers(None, ["a"])) == {"expectedFinalizers": {}}

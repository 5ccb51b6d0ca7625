"""rollouts.operator.collasets_expecting: expectations settle when the watch shows a write, or expire."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import pytest

from rollouts.operator.collasets_expecting import Expect, Expectation, Expectations, Kind


def obj(rv: str = "1", *, uid: str = "u1", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": rv, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2024-05-01T12:00:00Z"
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("expectation", "found", "met"),
    [
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.PRESENT, deadline=1),
            None,
            False,
            id="present-missing",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.PRESENT, deadline=1),
            obj(),
            True,
            id="present-seen",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.CHANGED, resource_version="1", deadline=1),
            obj("1"),
            False,
            id="changed-same-version",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.CHANGED, resource_version="1", deadline=1),
            obj("2"),
            True,
            id="changed-new-version",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.CHANGED, resource_version="1", deadline=1),
            None,
            True,
            id="changed-gone",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.GONE, uid="u1", deadline=1),
            obj(),
            False,
            id="gone-still-there",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.GONE, uid="u1", deadline=1),
            obj(deleting=True),
            True,
            id="gone-terminating",
        ),
        pytest.param(
            Expectation(kind=Kind.POD, name="a", expect=Expect.GONE, uid="u1", deadline=1),
            obj(uid="u2"),
            True,
            id="gone-replaced-by-same-name",
        ),
        pytest.param(
            Expectation(kind=Kind.RULE, name="r", expect=Expect.GONE, deadline=1),
            obj(),
            False,
            id="gone-no-uid-still-there",
        ),
        pytest.param(
            Expectation(kind=Kind.RULE, name="r", expect=Expect.GONE, deadline=1),
            None,
            True,
            id="gone-missing",
        ),
    ],
)
def test_met(expectation: Expectation, found: Mapping[str, Any] | None, met: bool) -> None:
    assert expectation.met(found) is met


class Store:
    """A fake index: (kind, name) -> object."""

    def __init__(self) -> None:
        self.objects: dict[tuple[Kind, str], Mapping[str, Any]] = {}

    def find(self, kind: Kind, name: str) -> Mapping[str, Any] | None:
        return self.objects.get((kind, name))


def test_settle_waits_until_each_write_shows() -> None:
    store = Store()
    store.objects[(Kind.POD, "b")] = obj("1")
    expectations = Expectations(timeout=30)
    expectations.expect_present(Kind.POD, "a", now=100)
    expectations.expect_changed(Kind.POD, "b", resource_version="1", now=105)
    assert expectations.settle(store.find, now=110) == pytest.approx(20)
    assert expectations.pending() == ["pod a present", "pod b changed"]
    store.objects[(Kind.POD, "a")] = obj()
    assert expectations.settle(store.find, now=111) == pytest.approx(24)
    assert expectations.pending() == ["pod b changed"]
    store.objects[(Kind.POD, "b")] = obj("2")
    assert expectations.settle(store.find, now=112) is None
    assert expectations.pending() == []


def test_settle_expires_with_a_warning_and_decides_anyway(caplog: pytest.LogCaptureFixture) -> None:
    store = Store()
    expectations = Expectations(timeout=30)
    expectations.expect_present(Kind.JOB, "hook-a", now=100)
    expectations.expect_gone(Kind.RULE, "web-max-unavailable", uid="u", now=120)
    store.objects[(Kind.RULE, "web-max-unavailable")] = obj(uid="u")
    with caplog.at_level(logging.WARNING, logger="rollouts.collasets"):
        left = expectations.settle(store.find, now=130, owner="ns/web")
    assert left == pytest.approx(20)
    assert expectations.pending() == ["podtransitionrule web-max-unavailable gone"]
    assert [r.getMessage() for r in caplog.records] == [
        "collaset ns/web: expectation job hook-a present not met within 30s; deciding anyway"
    ]


def test_nothing_open_settles_at_once() -> None:
    assert Expectations().settle(Store().find, now=0) is None

"""The operation history annotation: what a write adds to it, its bounds, and reading it back."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pytest

from lifecycle.history import (
    HISTORY_ANNOTATION,
    MAX_DONE,
    MAX_HOLDS,
    History,
    Hold,
    Holder,
    OperationRecord,
    Outcome,
    format_history,
    holders_of,
    parse_history,
    phase_stamps,
    record,
    updated_annotation,
)
from lifecycle.labels import (
    COMPLETING,
    DONE_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_TYPE,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    UNDO_OPERATION_TYPE,
)
from lifecycle.rules.models import DETAIL_ANNOTATION_PREFIX
from lifecycle.states import OperationPhase, parse_state

from .lifecycle_builders import CONTROLLED, EXPECT_TRAFFIC, TRAFFIC_FINALIZER, op, pod

P = OperationPhase
MS = 1_000_000
#: "now" of the write under test, in ms and ns.
NOW_MS = 9_000
NOW_NS = NOW_MS * MS


def ns(millis: int) -> str:
    return str(millis * MS)


def labels_of(
    op_id: str, stamps: Mapping[str, int], *, t: str = "update", typed: str = OPERATION_TYPE
) -> dict[str, str]:
    """Labels of one operation: prefix -> stamp (ms), plus its type label."""
    found = {f"{prefix}/{op_id}": ns(millis) for prefix, millis in stamps.items()}
    found[f"{typed}/{op_id}"] = t
    return pod(found)


def live(
    op_id: str, entered: Mapping[P, int], *, t: str = "update", holds: tuple[Hold, ...] = ()
) -> OperationRecord:
    return OperationRecord(id=op_id, type=t, entered=entered, holds=holds)


def done(
    op_id: str, entered: Mapping[P, int], outcome: Outcome, *, t: str = "update", holds: tuple[Hold, ...] = ()
) -> OperationRecord:
    return OperationRecord(id=op_id, type=t, entered=entered, holds=holds, outcome=outcome, ended_ms=NOW_MS)


def rejected(ptr: str, stage: str = "PreCheck") -> dict[str, str]:
    return {f"{DETAIL_ANNOTATION_PREFIX}/{ptr}": json.dumps({"stage": stage, "passed": False})}


GATE = Holder(by="podtransitionrule gate", phase=P.PRE_CHECK, reason="rule check: label missing")
TRAFFIC = Holder(by=f"finalizer {TRAFFIC_FINALIZER}", phase=P.PREPARING)


@pytest.mark.parametrize(
    ("history", "before", "after", "holders", "expected"),
    [
        pytest.param(
            History(),
            CONTROLLED,
            CONTROLLED,
            (),
            History(),
            id="no-operation-no-record",
        ),
        pytest.param(
            History(),
            labels_of("u", {OPERATING: 1000}),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001}),
            (),
            History(live=(live("u", {P.BEGUN: 1000, P.PRE_CHECK: 1001}),)),
            id="begin-then-pre-check",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.PRE_CHECK: 1001}),)),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001, PRE_CHECKED: 2000}),
            labels_of("u", {OPERATING: 1000, PRE_CHECKED: 2000, OPERATE: 2000}),
            (),
            History(
                live=(live("u", {P.BEGUN: 1000, P.PRE_CHECK: 1001, P.PRE_CHECKED: 2000, P.OPERATING: 2000}),)
            ),
            id="folded-steps-keep-the-stamps-of-both-label-sets",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.PRE_CHECK: 1001, P.OPERATING: 2000}),)),
            labels_of("u", {OPERATED: 3000, POST_CHECKED: 4000, COMPLETING: 4001}, typed=DONE_OPERATION_TYPE),
            CONTROLLED,
            (),
            History(
                done=(
                    done(
                        "u",
                        {
                            P.BEGUN: 1000,
                            P.PRE_CHECK: 1001,
                            P.OPERATING: 2000,
                            P.OPERATED: 3000,
                            P.POST_CHECKED: 4000,
                            P.COMPLETING: 4001,
                        },
                        Outcome.COMPLETED,
                    ),
                )
            ),
            id="cleanup-completes",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.OPERATED: 3000}),)),
            labels_of("u", {OPERATED: 3000, POST_CHECK: 3000}, typed=DONE_OPERATION_TYPE),
            CONTROLLED,
            (),
            History(
                done=(
                    done(
                        "u",
                        {
                            P.BEGUN: 1000,
                            P.OPERATED: 3000,
                            P.POST_CHECK: 3000,
                            P.POST_CHECKED: NOW_MS,
                            P.COMPLETING: NOW_MS,
                        },
                        Outcome.COMPLETED,
                    ),
                )
            ),
            id="post-checked-completing-and-cleaned-up-in-one-write",
        ),
        pytest.param(
            History(),
            labels_of("u", {OPERATE: 3000}),
            CONTROLLED,
            (),
            History(done=(done("u", {P.OPERATING: 3000}, Outcome.REMOVED),)),
            id="labels-of-an-operation-not-operated-removed-by-hand",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.PRE_CHECK: 1001}),)),
            pod(op("u", OPERATING, PRE_CHECK, value=ns(1000)), op("u", UNDO_OPERATION_TYPE)),
            CONTROLLED,
            (),
            History(done=(done("u", {P.BEGUN: 1000, P.PRE_CHECK: 1000}, Outcome.UNDONE),)),
            id="undo",
        ),
        pytest.param(
            History(),
            labels_of("u", {PRE_CHECK: 1001}),
            CONTROLLED,
            (),
            History(done=(done("u", {P.PRE_CHECK: 1001}, Outcome.ABANDONED),)),
            id="left-before-operating",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000}),)),
            CONTROLLED,
            CONTROLLED,
            (),
            History(done=(done("u", {P.BEGUN: 1000}, Outcome.REMOVED),)),
            id="labels-gone-unseen",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.COMPLETING: 4000}),)),
            labels_of("u", {OPERATING: 5000}),
            labels_of("u", {OPERATING: 5000, PRE_CHECK: 5000}),
            (),
            History(
                live=(live("u", {P.BEGUN: 5000, P.PRE_CHECK: 5000}),),
                done=(done("u", {P.BEGUN: 1000, P.COMPLETING: 4000}, Outcome.RESTARTED),),
            ),
            id="same-id-begins-again",
        ),
        pytest.param(
            History(),
            labels_of("a", {OPERATING: 1000, PRE_CHECK: 1000})
            | labels_of("b", {OPERATING: 1500}, t="restart"),
            labels_of("a", {OPERATING: 1000, PRE_CHECK: 1000})
            | labels_of("b", {OPERATING: 1500, PRE_CHECK: 1500}, t="restart"),
            (),
            History(
                live=(
                    live("a", {P.BEGUN: 1000, P.PRE_CHECK: 1000}),
                    live("b", {P.BEGUN: 1500, P.PRE_CHECK: 1500}, t="restart"),
                )
            ),
            id="several-ids",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.PRE_CHECK: 1001}),)),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001}),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001}),
            (GATE,),
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.PRE_CHECK: 1001},
                        holds=(
                            Hold(
                                by=GATE.by,
                                phase=P.PRE_CHECK,
                                since_ms=NOW_MS,
                                reason="rule check: label missing",
                            ),
                        ),
                    ),
                )
            ),
            id="rule-starts-holding",
        ),
        pytest.param(
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.PRE_CHECK: 1001},
                        holds=(Hold(by=GATE.by, phase=P.PRE_CHECK, since_ms=2000),),
                    ),
                )
            ),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001}),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001}),
            (GATE,),
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.PRE_CHECK: 1001},
                        holds=(Hold(by=GATE.by, phase=P.PRE_CHECK, since_ms=2000, reason=GATE.reason),),
                    ),
                )
            ),
            id="still-holding-learns-the-reason",
        ),
        pytest.param(
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.PRE_CHECK: 1001},
                        holds=(Hold(by=GATE.by, phase=P.PRE_CHECK, since_ms=2000),),
                    ),
                )
            ),
            labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001, PRE_CHECKED: NOW_MS}),
            labels_of("u", {OPERATING: 1000, PREPARING: NOW_MS}),
            (GATE,),  # the rule's annotation still says rejected: it no longer matches the phase
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.PRE_CHECK: 1001, P.PRE_CHECKED: NOW_MS, P.PREPARING: NOW_MS},
                        holds=(Hold(by=GATE.by, phase=P.PRE_CHECK, since_ms=2000, until_ms=NOW_MS),),
                    ),
                )
            ),
            id="rule-releases-when-the-phase-moves-on",
        ),
        pytest.param(
            History(live=(live("u", {P.BEGUN: 1000, P.PREPARING: 2000}),)),
            labels_of("u", {OPERATING: 1000, PRE_CHECKED: 2000, PREPARING: 2000}),
            labels_of("u", {OPERATING: 1000, PRE_CHECKED: 2000, PREPARING: 2000}),
            (TRAFFIC, GATE),
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.PRE_CHECKED: 2000, P.PREPARING: 2000},
                        holds=(Hold(by=TRAFFIC.by, phase=P.PREPARING, since_ms=NOW_MS),),
                    ),
                )
            ),
            id="protection-finalizer-holds-preparing",
        ),
        pytest.param(
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000},
                        holds=(Hold(by="finalizer x", phase=P.PREPARING, since_ms=2000, until_ms=3000),),
                    ),
                )
            ),
            labels_of("u", {OPERATED: 3000, COMPLETING: 4000}, typed=DONE_OPERATION_TYPE),
            CONTROLLED,
            (),
            History(
                done=(
                    done(
                        "u",
                        {P.BEGUN: 1000, P.OPERATED: 3000, P.COMPLETING: 4000},
                        Outcome.COMPLETED,
                        holds=(Hold(by="finalizer x", phase=P.PREPARING, since_ms=2000, until_ms=3000),),
                    ),
                )
            ),
            id="finished-operation-keeps-its-holds",
        ),
        pytest.param(
            History(
                live=(
                    live(
                        "u",
                        {P.BEGUN: 1000, P.COMPLETING: 4000},
                        holds=(Hold(by="expected finalizer f", phase=P.COMPLETING, since_ms=4000),),
                    ),
                )
            ),
            labels_of("u", {OPERATED: 3000, COMPLETING: 4000}, typed=DONE_OPERATION_TYPE),
            CONTROLLED,
            (),
            History(
                done=(
                    done(
                        "u",
                        {P.BEGUN: 1000, P.OPERATED: 3000, P.COMPLETING: 4000},
                        Outcome.COMPLETED,
                        holds=(
                            Hold(
                                by="expected finalizer f", phase=P.COMPLETING, since_ms=4000, until_ms=NOW_MS
                            ),
                        ),
                    ),
                )
            ),
            id="open-holds-close-when-the-operation-ends",
        ),
    ],
)
def test_record(
    history: History,
    before: dict[str, str],
    after: dict[str, str],
    holders: tuple[Holder, ...],
    expected: History,
) -> None:
    assert record(history, before=before, after=after, holders=holders, now_ns=NOW_NS) == expected


def test_done_keeps_the_latest_operations() -> None:
    history = History(done=tuple(done(f"old{i}", {P.BEGUN: i}, Outcome.COMPLETED) for i in range(MAX_DONE)))
    before = labels_of("new", {OPERATED: 1, COMPLETING: 2}, typed=DONE_OPERATION_TYPE)
    result = record(history, before=before, after=CONTROLLED, now_ns=NOW_NS)
    assert [r.id for r in result.done] == [f"old{i}" for i in range(1, MAX_DONE)] + ["new"]


def test_holds_are_bounded_dropping_the_oldest_closed_one() -> None:
    closed = tuple(Hold(by=f"f{i}", phase=P.PREPARING, since_ms=i, until_ms=i + 1) for i in range(MAX_HOLDS))
    history = History(live=(live("u", {P.PREPARING: 1}, holds=closed),))
    labels = labels_of("u", {OPERATING: 1, PRE_CHECKED: 1, PREPARING: 1})
    result = record(history, before=labels, after=labels, holders=(TRAFFIC,), now_ns=NOW_NS)
    (rec,) = result.live
    assert len(rec.holds) == MAX_HOLDS
    assert [h.by for h in rec.holds] == [f"f{i}" for i in range(1, MAX_HOLDS)] + [TRAFFIC.by]


@pytest.mark.parametrize(
    ("annotations", "finalizers", "rejections", "expected"),
    [
        pytest.param({}, (), {}, (), id="nothing"),
        pytest.param(
            rejected("gate"),
            (),
            {"gate": "rule check: label missing"},
            (GATE,),
            id="rejecting-rule-with-reason",
        ),
        pytest.param(
            rejected("late", "PostCheck"),
            (),
            {},
            (Holder(by="podtransitionrule late", phase=P.POST_CHECK),),
            id="post-check-rule-reason-unknown",
        ),
        pytest.param(
            {f"{DETAIL_ANNOTATION_PREFIX}/ok": json.dumps({"stage": "PreCheck", "passed": True})},
            (),
            {},
            (),
            id="passing-rule-holds-nothing",
        ),
        pytest.param(
            {f"{DETAIL_ANNOTATION_PREFIX}/idle": json.dumps({"stage": "Unknown", "passed": True})},
            (),
            {},
            (),
            id="pod-in-no-stage",
        ),
        pytest.param({f"{DETAIL_ANNOTATION_PREFIX}/x": "{not json"}, (), {}, (), id="garbage-detail-skipped"),
        pytest.param({}, (TRAFFIC_FINALIZER, "other/finalizer"), {}, (TRAFFIC,), id="protection-finalizer"),
        pytest.param(
            EXPECT_TRAFFIC,
            (),
            {},
            (Holder(by=f"expected finalizer {TRAFFIC_FINALIZER}", phase=P.COMPLETING),),
            id="missing-expected-finalizer",
        ),
    ],
)
def test_holders_of(
    annotations: dict[str, str],
    finalizers: tuple[str, ...],
    rejections: dict[str, str],
    expected: tuple[Holder, ...],
) -> None:
    assert holders_of(annotations=annotations, finalizers=finalizers, rejections=rejections) == expected


def test_phase_stamps_skip_unparsable_values() -> None:
    (state,) = parse_state(
        pod(op("u", OPERATING, value="soon"), op("u", PRE_CHECK, value=ns(5)))
    ).operations.values()
    assert phase_stamps(state) == {P.PRE_CHECK: 5}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(None, History(), id="absent"),
        pytest.param("", History(), id="empty"),
        pytest.param("{not json", History(), id="not-json"),
        pytest.param("[1, 2]", History(), id="not-an-object"),
        pytest.param(
            json.dumps(
                {"live": [{"id": "u", "type": "update", "at": {"Begun": 1, "Nowhere": 2, "PreCheck": -3}}]}
            ),
            History(live=(live("u", {P.BEGUN: 1}),)),
            id="unknown-phases-and-bad-times-skipped",
        ),
        pytest.param(
            json.dumps(
                {"live": [{"type": "update"}, "x"], "done": [{"id": "d", "outcome": "Exploded", "at": {}}]}
            ),
            History(done=(OperationRecord(id="d", outcome=Outcome.REMOVED),)),
            id="records-without-id-skipped-unknown-outcome-removed",
        ),
        pytest.param(
            json.dumps(
                {
                    "live": [
                        {
                            "id": "u",
                            "held": [
                                {"by": "f", "in": "Preparing"},
                                {"by": "g", "in": "Preparing", "from": 4},
                            ],
                        }
                    ]
                }
            ),
            History(live=(OperationRecord(id="u", holds=(Hold(by="g", phase=P.PREPARING, since_ms=4),)),)),
            id="holds-without-start-skipped",
        ),
    ],
)
def test_parse_history(value: str | None, expected: History) -> None:
    assert parse_history(value) == expected


def test_format_and_parse_round_trip() -> None:
    history = History(
        live=(
            live(
                "u",
                {P.BEGUN: 1, P.PRE_CHECK: 2},
                holds=(Hold(by="x", phase=P.PRE_CHECK, since_ms=2, reason="r"),),
            ),
        ),
        done=(done("d", {P.BEGUN: 0, P.COMPLETING: 5}, Outcome.COMPLETED),),
    )
    value = format_history(history)
    assert parse_history(value) == history
    assert json.loads(value)["done"][0] == {
        "id": "d",
        "type": "update",
        "at": {"Begun": 0, "Completing": 5},
        "outcome": "Completed",
        "end": NOW_MS,
    }


def test_updated_annotation_writes_once_then_nothing() -> None:
    before = labels_of("u", {OPERATING: 1000})
    after = labels_of("u", {OPERATING: 1000, PRE_CHECK: 1001})
    annotations = rejected("gate")
    first = updated_annotation(
        annotations=annotations,
        before=before,
        after=after,
        rejections={"gate": "rule check: no"},
        now_ns=NOW_NS,
    )
    assert first is not None
    (rec,) = parse_history(first).live
    assert rec.holds == (
        Hold(by="podtransitionrule gate", phase=P.PRE_CHECK, since_ms=NOW_MS, reason="rule check: no"),
    )
    again = updated_annotation(
        annotations={**annotations, HISTORY_ANNOTATION: first},
        before=after,
        after=after,
        now_ns=NOW_NS + 5 * MS,
    )
    assert again is None


def test_updated_annotation_leaves_pods_without_operations_alone() -> None:
    assert updated_annotation(annotations={}, before=CONTROLLED, after=CONTROLLED, now_ns=NOW_NS) is None


def test_updated_annotation_is_bounded() -> None:
    history = History(
        done=tuple(
            done(
                f"operation-{i:02d}-" + "x" * 40,
                {phase: i for phase in P if phase is not P.UNDO},
                Outcome.COMPLETED,
                holds=tuple(
                    Hold(by="h" * 300, phase=P.PREPARING, since_ms=1, until_ms=2) for _ in range(MAX_HOLDS)
                ),
            )
            for i in range(MAX_DONE)
        )
    )
    before = labels_of("new", {OPERATED: 1, COMPLETING: 2}, typed=DONE_OPERATION_TYPE)
    value = updated_annotation(
        annotations={HISTORY_ANNOTATION: format_history(history)},
        before=before,
        after=CONTROLLED,
        now_ns=NOW_NS,
    )
    assert value is not None
    assert len(value) < 32 * 1024
    assert len(parse_history(value).done) == MAX_DONE

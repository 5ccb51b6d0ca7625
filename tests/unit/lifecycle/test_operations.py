"""The operation-controller library: begin / allow_ops / finish / undo / is_during_ops, and LabelChange."""

from __future__ import annotations

import pytest

from lifecycle.changes import LabelChange
from lifecycle.labels import (
    COMPLETING,
    DELETE,
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
    PREPARING_TO_DELETE,
    UNDO_OPERATION_TYPE,
    OperationId,
    OperationType,
    id_key,
)
from lifecycle.operations import (
    POD_DELETE_ADAPTER,
    AllowDecision,
    LabelAdapter,
    OperationAdapter,
    OperationConflict,
    allow_ops,
    begin,
    finish,
    is_during_ops,
    operation_job_adapter,
    undo,
)
from lifecycle.states import InvalidLifecycleLabel

from .lifecycle_builders import NOW, OLD, T, op, pod

HOOK = "example.io/hooked"


def adapter(op_id: str = "id-1", op_type: str = "type-1", *, multi: bool = True) -> LabelAdapter:
    return LabelAdapter(
        id=OperationId(op_id),
        type=OperationType(op_type),
        allow_multi_type=multi,
        mark_on_begin=frozenset({HOOK}),
        unmark_on_finish=frozenset({HOOK}),
    )


def test_label_adapter_is_an_operation_adapter() -> None:
    a: OperationAdapter = adapter()
    assert (a.id, a.type, a.allow_multi_type) == ("id-1", "type-1", True)


# -- begin -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "the_adapter", "set_labels", "remove_labels"),
    [
        pytest.param(
            pod(),
            adapter(),
            {id_key(OPERATING, "id-1"): T, id_key(OPERATION_TYPE, "id-1"): "type-1", HOOK: T},
            set(),
            id="clean-pod",
        ),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, t="type-1"), {HOOK: OLD}),
            adapter(),
            {},
            set(),
            id="already-operating",
        ),
        pytest.param(
            pod(op("id-1", OPERATION_TYPE, PRE_CHECKED, OPERATE, t="type-1"), {HOOK: OLD}),
            adapter(),
            {id_key(OPERATING, "id-1"): T},
            set(),
            id="resume-after-finish-restores-operating",
        ),
        pytest.param(
            pod(op("id-2", OPERATING, OPERATION_TYPE, t="type-1")),
            adapter(multi=True),
            {id_key(OPERATING, "id-1"): T, id_key(OPERATION_TYPE, "id-1"): "type-1", HOOK: T},
            set(),
            id="other-id-same-type-multi-allowed",
        ),
        pytest.param(
            pod(op("id-2", OPERATED, DONE_OPERATION_TYPE, t="type-1")),
            adapter(multi=False),
            {id_key(OPERATING, "id-1"): T, id_key(OPERATION_TYPE, "id-1"): "type-1", HOOK: T},
            set(),
            id="other-id-same-type-already-operated-does-not-count",
        ),
        pytest.param(
            pod(op("id-1", OPERATED, DONE_OPERATION_TYPE, POST_CHECK, t="type-1")),
            adapter(),
            {id_key(OPERATING, "id-1"): T, id_key(OPERATION_TYPE, "id-1"): "type-1", HOOK: T},
            {id_key(p, "id-1") for p in (OPERATED, DONE_OPERATION_TYPE, POST_CHECK)},
            id="restart-id-still-in-post-check",
        ),
        pytest.param(
            pod(op("id-1", OPERATED, DONE_OPERATION_TYPE, POST_CHECKED, COMPLETING, t="type-0")),
            adapter(),
            {id_key(OPERATING, "id-1"): T, id_key(OPERATION_TYPE, "id-1"): "type-1", HOOK: T},
            {id_key(p, "id-1") for p in (OPERATED, DONE_OPERATION_TYPE, POST_CHECKED, COMPLETING)},
            id="restart-completing-id-with-another-type",
        ),
        pytest.param(
            pod(op("id-1", OPERATING)),
            adapter(),
            {id_key(OPERATION_TYPE, "id-1"): "type-1", HOOK: T},
            set(),
            id="untyped-operating-gets-its-type",
        ),
    ],
)
def test_begin(
    labels: dict[str, str], the_adapter: LabelAdapter, set_labels: dict[str, str], remove_labels: set[str]
) -> None:
    change = begin(the_adapter, labels, now_ns=NOW)
    assert dict(change.set_labels) == set_labels
    assert change.remove_labels == remove_labels
    assert is_during_ops(the_adapter, change.apply(labels))


@pytest.mark.parametrize(
    ("labels", "the_adapter", "message"),
    [
        pytest.param(
            pod(op("id-2", OPERATING, OPERATION_TYPE, t="type-1")),
            adapter(multi=False),
            "operationType type-1 exists: [operation-type.podopslifecycle.kusionstack.io/id-2]",
            id="other-id-same-type-multi-forbidden",
        ),
        pytest.param(
            pod(
                op("id-2", OPERATING, OPERATION_TYPE, t="type-1"),
                op("id-3", OPERATION_TYPE, OPERATE, t="type-1"),
            ),
            adapter(multi=False),
            "operationType type-1 exists: [operation-type.podopslifecycle.kusionstack.io/id-2, "
            "operation-type.podopslifecycle.kusionstack.io/id-3]",
            id="two-holders-listed-sorted",
        ),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, PRE_CHECK, t="update")),
            adapter(op_type="scale-in"),
            "operatingID id-1 already has operationType update; finish or undo it before beginning scale-in",
            id="same-id-other-type-is-never-overwritten",
        ),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, UNDO_OPERATION_TYPE, t="type-1")),
            adapter(),
            "operatingID id-1 is being undone",
            id="id-being-undone",
        ),
    ],
)
def test_begin_conflicts(labels: dict[str, str], the_adapter: LabelAdapter, message: str) -> None:
    with pytest.raises(OperationConflict) as caught:
        begin(the_adapter, labels, now_ns=NOW)
    assert str(caught.value).startswith(message)
    assert (caught.value.op_id, caught.value.op_type) == (the_adapter.id, the_adapter.type)


def test_begin_rejects_invalid_labels() -> None:
    with pytest.raises(InvalidLifecycleLabel):
        begin(adapter(), pod({OPERATING: "1"}), now_ns=NOW)


def test_pod_delete_adapter_marks_preparing_to_delete_once() -> None:
    change = begin(POD_DELETE_ADAPTER, pod(), now_ns=NOW)
    assert change.set_labels[PREPARING_TO_DELETE] == T
    assert change.set_labels[id_key(OPERATION_TYPE, "pod-delete")] == DELETE
    again = begin(POD_DELETE_ADAPTER, pod({PREPARING_TO_DELETE: OLD}), now_ns=NOW)
    assert PREPARING_TO_DELETE not in again.set_labels


@pytest.mark.parametrize(
    ("job_name", "op_id"),
    [
        pytest.param("job", "job", id="short-name-is-the-id"),
        pytest.param("j" * 63, "j" * 63, id="63-chars"),
        pytest.param("j" * 64, "0x", id="long-name-hashed"),
    ],
)
def test_operation_job_adapter(job_name: str, op_id: str) -> None:
    a = operation_job_adapter(job_name=job_name, action="replace")
    assert a.id.startswith(op_id) and len(a.id) <= 63
    assert a.type == "replace"


# -- is_during_ops / allow_ops --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "during", "decision"),
    [
        pytest.param(pod(), False, AllowDecision(allowed=False), id="clean"),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, t="type-1")),
            True,
            AllowDecision(allowed=False),
            id="begun",
        ),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, PRE_CHECKED, PREPARING, t="type-1")),
            True,
            AllowDecision(allowed=False),
            id="preparing",
        ),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, PRE_CHECKED, OPERATE, t="type-1")),
            True,
            AllowDecision(allowed=True),
            id="operate",
        ),
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, OPERATE, t="other")),
            False,
            AllowDecision(allowed=False),
            id="operate-but-other-type",
        ),
        pytest.param(
            pod(op("id-1", OPERATION_TYPE, OPERATE, t="type-1")),
            False,
            AllowDecision(allowed=False),
            id="operate-after-finish",
        ),
    ],
)
def test_is_during_ops_and_allow_ops(labels: dict[str, str], during: bool, decision: AllowDecision) -> None:
    assert is_during_ops(adapter(), labels) is during
    assert allow_ops(adapter(), labels, now_ns=NOW) == decision


@pytest.mark.parametrize(
    ("operate_value", "delay", "decision"),
    [
        pytest.param(str(NOW - 10_000_000_000), 5.0, AllowDecision(allowed=True), id="delay-elapsed"),
        pytest.param(
            str(NOW - 2_000_000_000), 5.0, AllowDecision(allowed=False, retry_after_seconds=3.0), id="wait"
        ),
        pytest.param(str(NOW), 0.0, AllowDecision(allowed=True), id="no-delay"),
        pytest.param("garbage", 5.0, AllowDecision(allowed=True), id="unparsable-does-not-delay"),
    ],
)
def test_allow_ops_delay(operate_value: str, delay: float, decision: AllowDecision) -> None:
    labels = pod(op("id-1", OPERATING, OPERATION_TYPE, t="type-1"), {id_key(OPERATE, "id-1"): operate_value})
    assert allow_ops(adapter(), labels, now_ns=NOW, delay_seconds=delay) == decision


# -- finish / undo ---------------------------------------------------------------------------------


def test_finish_undoes_when_begin_and_ends_during_ops() -> None:
    labels = pod()
    labels = begin(adapter(), labels, now_ns=NOW).apply(labels)
    assert labels[HOOK] == T
    labels[id_key(OPERATE, "id-1")] = T
    assert allow_ops(adapter(), labels, now_ns=NOW).allowed
    change = finish(adapter(), labels)
    assert change.remove_labels == {id_key(OPERATING, "id-1"), HOOK}
    after = change.apply(labels)
    assert not is_during_ops(adapter(), after)
    assert after[id_key(OPERATION_TYPE, "id-1")] == "type-1"  # the state machine converts it


@pytest.mark.parametrize(
    ("labels", "remove_labels"),
    [
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, OPERATE, t="type-1")), {f"{OPERATING}/id-1"}, id="ok"
        ),
        pytest.param(pod(op("id-1", OPERATION_TYPE, OPERATE, t="type-1")), set(), id="already-finished"),
        pytest.param(pod(), set(), id="not-on-pod"),
        pytest.param(pod({HOOK: OLD}), {HOOK}, id="hook-runs-anyway"),
    ],
)
def test_finish(labels: dict[str, str], remove_labels: set[str]) -> None:
    change = finish(adapter(), labels)
    assert change.remove_labels == remove_labels
    assert not change.set_labels


def test_finish_with_another_type_is_a_conflict() -> None:
    with pytest.raises(OperationConflict, match=r"^operatingID id-1 has invalid operationType update"):
        finish(adapter(), pod(op("id-1", OPERATING, OPERATION_TYPE, t="update")))


@pytest.mark.parametrize(
    ("labels", "set_labels"),
    [
        pytest.param(
            pod(op("id-1", OPERATING, OPERATION_TYPE, PRE_CHECK, t="type-1")),
            {f"{UNDO_OPERATION_TYPE}/id-1": "type-1"},
            id="begun",
        ),
        pytest.param(
            pod(op("id-1", OPERATED, DONE_OPERATION_TYPE, t="type-1")),
            {f"{UNDO_OPERATION_TYPE}/id-1": "type-1"},
            id="operated",
        ),
        pytest.param(pod(), {}, id="not-on-pod"),
        pytest.param(pod(op("id-1", OPERATING, UNDO_OPERATION_TYPE, t="type-1")), {}, id="already-undone"),
    ],
)
def test_undo(labels: dict[str, str], set_labels: dict[str, str]) -> None:
    change = undo(adapter(), labels)
    assert dict(change.set_labels) == set_labels
    assert not change.remove_labels


def test_undo_with_another_type_is_a_conflict() -> None:
    with pytest.raises(OperationConflict, match="cannot undo it as type-1"):
        undo(adapter(), pod(op("id-1", OPERATING, OPERATION_TYPE, t="update")))


# -- LabelChange ----------------------------------------------------------------------------------


def test_label_change_merge_patch_with_resource_version() -> None:
    change = LabelChange(set_labels={"b": "2"}, remove_labels=frozenset({"a"}))
    assert change.to_merge_patch() == {"metadata": {"labels": {"a": None, "b": "2"}}}
    assert change.to_merge_patch(resource_version="42") == {
        "metadata": {"labels": {"a": None, "b": "2"}, "resourceVersion": "42"}
    }
    assert LabelChange().to_merge_patch(resource_version="42") == {}


@pytest.mark.parametrize(
    ("first", "second", "composed"),
    [
        pytest.param(
            LabelChange(set_labels={"a": "1"}),
            LabelChange(remove_labels=frozenset({"a"})),
            LabelChange(remove_labels=frozenset({"a"})),
            id="set-then-remove",
        ),
        pytest.param(
            LabelChange(remove_labels=frozenset({"a"})),
            LabelChange(set_labels={"a": "2"}),
            LabelChange(set_labels={"a": "2"}),
            id="remove-then-set",
        ),
        pytest.param(
            LabelChange(set_labels={"a": "1", "b": "1"}),
            LabelChange(set_labels={"a": "2"}),
            LabelChange(set_labels={"a": "2", "b": "1"}),
            id="later-wins",
        ),
    ],
)
def test_label_change_then(first: LabelChange, second: LabelChange, composed: LabelChange) -> None:
    assert first.then(second) == composed
    base = {"a": "0", "c": "0"}
    assert composed.apply(base) == second.apply(first.apply(base))


def test_label_change_between_and_disjointness() -> None:
    before, after = {"a": "1", "b": "1"}, {"b": "2", "c": "3"}
    change = LabelChange.between(before, after)
    assert change == LabelChange(set_labels={"b": "2", "c": "3"}, remove_labels=frozenset({"a"}))
    assert change.apply(before) == after
    with pytest.raises(ValueError, match="both set and removed"):
        LabelChange(set_labels={"a": "1"}, remove_labels=frozenset({"a"}))

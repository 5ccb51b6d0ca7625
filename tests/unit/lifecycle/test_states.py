"""Parsing lifecycle labels: id discovery, phases per id and per pod, the rule stage."""

from __future__ import annotations

import pytest

from lifecycle.labels import (
    COMPLETING,
    DONE_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    OPERATING,
    OPERATION_PERMISSION,
    OPERATION_TYPE,
    POST_CHECK,
    POST_CHECKED,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    SERVICE_AVAILABLE,
    STAY_OFFLINE,
    UNDO_OPERATION_TYPE,
)
from lifecycle.states import (
    InvalidLifecycleLabel,
    OperationPhase,
    PodPhase,
    Stage,
    has_operation,
    parse_state,
    split_lifecycle_key,
)

from .lifecycle_builders import op, perm, pod


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        pytest.param(f"{OPERATING}/a", (OPERATING, "a"), id="operating"),
        pytest.param(f"{PRE_CHECK}/a", (PRE_CHECK, "a"), id="pre-check"),
        pytest.param(f"{PRE_CHECKED}/a", (PRE_CHECKED, "a"), id="pre-checked-not-confused-with-pre-check"),
        pytest.param(f"{POST_CHECKED}/a", (POST_CHECKED, "a"), id="post-checked"),
        pytest.param(f"{OPERATION_PERMISSION}/update", (OPERATION_PERMISSION, "update"), id="permission"),
        pytest.param("app", None, id="plain-label"),
        pytest.param(SERVICE_AVAILABLE, None, id="pod-level-lifecycle-label"),
        pytest.param("kusionstack.io/control", None, id="control"),
        pytest.param(f"{OPERATING}.example.com/a", None, id="longer-dns-prefix-is-not-ours"),
    ],
)
def test_split_lifecycle_key(key: str, expected: tuple[str, str] | None) -> None:
    assert split_lifecycle_key(key) == expected


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(OPERATING, id="operating-bare"),
        pytest.param(PRE_CHECK, id="pre-check-bare"),
        pytest.param(OPERATION_PERMISSION, id="permission-bare"),
        pytest.param(f"{OPERATING}-x", id="prefix-with-suffix-no-slash"),
        pytest.param(f"{OPERATING}/", id="empty-id"),
        pytest.param(f"{OPERATING}/a/b", id="three-parts"),
    ],
)
def test_invalid_lifecycle_key(key: str) -> None:
    with pytest.raises(InvalidLifecycleLabel, match=f"^invalid label {key}$"):
        parse_state(pod({key: "1"}))


# -- id discovery (Operating's IDToLabelsMap scenarios, plus the ids it cannot see) --------------


@pytest.mark.parametrize(
    ("labels", "ids", "type_counts"),
    [
        pytest.param({}, [], {}, id="empty"),
        pytest.param(pod({"app": "x"}), [], {}, id="no-lifecycle-labels"),
        pytest.param(pod(op("a", OPERATING, OPERATION_TYPE)), ["a"], {"update": 1}, id="operating-id"),
        pytest.param(pod(op("a", OPERATED, DONE_OPERATION_TYPE)), ["a"], {"update": 1}, id="operated-id"),
        pytest.param(pod(op("a", OPERATE)), ["a"], {}, id="operate-id-untyped"),
        pytest.param(
            pod(op("a", OPERATING, OPERATION_TYPE), op("b", OPERATING, OPERATION_TYPE, t="scale-in")),
            ["a", "b"],
            {"update": 1, "scale-in": 1},
            id="two-ids-different-types",
        ),
        pytest.param(
            pod(op("a", OPERATING, OPERATION_TYPE), op("b", OPERATED, DONE_OPERATION_TYPE)),
            ["a", "b"],
            {"update": 2},
            id="two-ids-same-type-counting-done-type",
        ),
        pytest.param(pod(op("a", PRE_CHECK)), ["a"], {}, id="pre-check-only-id-is-visible"),
        pytest.param(pod(op("a", UNDO_OPERATION_TYPE)), ["a"], {}, id="undo-only-id-is-visible"),
        pytest.param(pod(perm("update")), [], {}, id="permission-is-not-an-id"),
    ],
)
def test_id_discovery(labels: dict[str, str], ids: list[str], type_counts: dict[str, int]) -> None:
    state = parse_state(labels)
    assert list(state.operations) == ids
    assert state.type_counts() == type_counts


def test_operation_values_and_types() -> None:
    state = parse_state(
        pod(
            op("a", OPERATING, OPERATION_TYPE, PRE_CHECK),
            op("b", UNDO_OPERATION_TYPE, t="delete"),
            perm("update"),
        )
    )
    a, b = state.operations["a"], state.operations["b"]
    assert a.values == {OPERATING: "1402144848", OPERATION_TYPE: "update", PRE_CHECK: "1402144848"}
    assert (a.active_type, a.done_type, a.type, a.undo_type) == ("update", None, "update", None)
    assert a.label_keys() == {f"{OPERATING}/a", f"{OPERATION_TYPE}/a", f"{PRE_CHECK}/a"}
    assert (b.is_undone, b.is_live, b.undo_type) == (True, False, "delete")
    assert state.permissions == {"update": "1402144848"}


@pytest.mark.parametrize(
    ("labels", "op_id", "expected"),
    [
        pytest.param(pod(op("a", OPERATING, OPERATION_TYPE)), "a", True, id="present"),
        pytest.param(pod(op("a", OPERATING, OPERATION_TYPE)), "b", False, id="other-id"),
        pytest.param(pod(op("a", COMPLETING)), "a", True, id="any-label-counts"),
        pytest.param(None, "a", False, id="no-labels"),
    ],
)
def test_has_operation(labels: dict[str, str] | None, op_id: str, expected: bool) -> None:
    assert has_operation(labels, op_id) is expected


# -- per-id phase precedence ----------------------------------------------------------------------

_BEGUN = (OPERATING, OPERATION_TYPE)


@pytest.mark.parametrize(
    ("prefixes", "phase"),
    [
        pytest.param(_BEGUN, OperationPhase.BEGUN, id="begun"),
        pytest.param((*_BEGUN, PRE_CHECK), OperationPhase.PRE_CHECK, id="pre-check"),
        pytest.param(
            (*_BEGUN, PRE_CHECK, PRE_CHECKED), OperationPhase.PRE_CHECKED, id="pre-checked-beats-pre-check"
        ),
        pytest.param((*_BEGUN, PRE_CHECKED, PREPARING), OperationPhase.PREPARING, id="preparing"),
        pytest.param((*_BEGUN, PRE_CHECKED, OPERATE), OperationPhase.OPERATING, id="operate"),
        pytest.param(
            (OPERATION_TYPE, PRE_CHECKED, OPERATE), OperationPhase.OPERATING, id="operate-after-finish"
        ),
        pytest.param((*_BEGUN, PREPARING, OPERATE), OperationPhase.OPERATING, id="operate-beats-preparing"),
        pytest.param((OPERATED, DONE_OPERATION_TYPE), OperationPhase.OPERATED, id="operated"),
        pytest.param((OPERATED, DONE_OPERATION_TYPE, POST_CHECK), OperationPhase.POST_CHECK, id="post-check"),
        pytest.param(
            (OPERATED, DONE_OPERATION_TYPE, POST_CHECK, POST_CHECKED),
            OperationPhase.POST_CHECKED,
            id="post-checked",
        ),
        pytest.param(
            (OPERATED, DONE_OPERATION_TYPE, POST_CHECKED, COMPLETING),
            OperationPhase.COMPLETING,
            id="completing",
        ),
        pytest.param((OPERATE, COMPLETING), OperationPhase.COMPLETING, id="completing-beats-operate"),
        pytest.param((*_BEGUN, PRE_CHECKED, UNDO_OPERATION_TYPE), OperationPhase.UNDO, id="undo-beats-all"),
        pytest.param((UNDO_OPERATION_TYPE, COMPLETING), OperationPhase.UNDO, id="undo-beats-completing"),
        pytest.param((OPERATION_TYPE,), OperationPhase.BEGUN, id="fallback"),
    ],
)
def test_operation_phase(prefixes: tuple[str, ...], phase: OperationPhase) -> None:
    assert parse_state(pod(op("a", *prefixes))).operations["a"].phase is phase


# -- pod phase ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "phase"),
    [
        pytest.param(pod(), PodPhase.NOT_AVAILABLE, id="fresh-pod"),
        pytest.param(pod({SERVICE_AVAILABLE: "1"}), PodPhase.SERVICE_AVAILABLE, id="service-available"),
        pytest.param(pod({STAY_OFFLINE: "true"}), PodPhase.IDLE, id="stay-offline"),
        pytest.param(pod(op("a", *_BEGUN), {SERVICE_AVAILABLE: "1"}), PodPhase.PRE_CHECK, id="begun"),
        pytest.param(pod(op("a", *_BEGUN, PRE_CHECK)), PodPhase.PRE_CHECK, id="pre-check"),
        pytest.param(
            pod(op("a", *_BEGUN, PRE_CHECKED), perm("update")), PodPhase.PREPARING, id="pre-checked"
        ),
        pytest.param(
            pod(op("a", *_BEGUN, PRE_CHECKED, PREPARING), perm("update")), PodPhase.PREPARING, id="prep"
        ),
        pytest.param(
            pod(op("a", *_BEGUN, PRE_CHECKED, OPERATE), perm("update")), PodPhase.OPERATING, id="operate"
        ),
        pytest.param(pod(op("a", OPERATED, DONE_OPERATION_TYPE)), PodPhase.OPERATING, id="operated"),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECK)), PodPhase.POST_CHECK, id="post-check"
        ),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECKED)), PodPhase.POST_CHECK, id="post-checked"
        ),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECKED, COMPLETING)),
            PodPhase.COMPLETING,
            id="completing",
        ),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, COMPLETING), op("b", *_BEGUN, PRE_CHECK)),
            PodPhase.PRE_CHECK,
            id="least-advanced-id-decides",
        ),
        pytest.param(
            pod(op("a", OPERATE, OPERATION_TYPE, PRE_CHECKED), op("b", *_BEGUN, PRE_CHECKED, PREPARING)),
            PodPhase.PREPARING,
            id="operate-and-preparing",
        ),
        pytest.param(
            pod(op("a", *_BEGUN, UNDO_OPERATION_TYPE), {SERVICE_AVAILABLE: "1"}),
            PodPhase.SERVICE_AVAILABLE,
            id="undone-ids-are-not-live",
        ),
        pytest.param(
            pod(op("a", OPERATION_TYPE, PRE_CHECK)), PodPhase.NOT_AVAILABLE, id="abandoned-ids-not-live"
        ),
    ],
)
def test_pod_phase(labels: dict[str, str], phase: PodPhase) -> None:
    assert parse_state(labels).phase is phase


# -- stage (deterministic when pre-check and post-check coexist) ---------------------------------


@pytest.mark.parametrize(
    ("labels", "stage"),
    [
        pytest.param(pod(), None, id="idle"),
        pytest.param(pod(op("a", *_BEGUN)), None, id="begun"),
        pytest.param(pod(op("a", *_BEGUN, PRE_CHECK)), Stage.PRE_CHECK, id="pre-check"),
        pytest.param(pod(op("a", *_BEGUN, PRE_CHECKED, PREPARING), perm("update")), None, id="preparing"),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECK)), Stage.POST_CHECK, id="post-check"
        ),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECK), op("b", *_BEGUN, PRE_CHECK)),
            Stage.PRE_CHECK,
            id="both-but-not-all-operated-pre-check-wins",
        ),
        pytest.param(
            pod(
                op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECK),
                op("b", OPERATED, DONE_OPERATION_TYPE, PRE_CHECK),
            ),
            Stage.POST_CHECK,
            id="both-and-all-operated-post-check-wins",
        ),
        pytest.param(
            pod(
                op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECK),
                op("b", *_BEGUN, PRE_CHECKED),
                perm("update"),
            ),
            None,
            id="post-check-waiting-for-late-id",
        ),
        pytest.param(
            pod(op("a", OPERATED, DONE_OPERATION_TYPE, POST_CHECK), op("b", *_BEGUN, UNDO_OPERATION_TYPE)),
            Stage.POST_CHECK,
            id="undone-id-does-not-hold-post-check",
        ),
    ],
)
def test_stage(labels: dict[str, str], stage: Stage | None) -> None:
    assert parse_state(labels).stage is stage

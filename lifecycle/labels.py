"""The PodOpsLifecycle protocol's names, exactly as KusionStack Operating writes them.

Everything that reads or writes a lifecycle label goes through these constants, so a
cooperation controller written for Operating sees the same keys and values from us.

Per-operation labels are keyed ``<prefix>/<id>``; their value is unix nanoseconds
(as a decimal string) except the three type labels, whose value is the operation type.

| prefix (+ ``/<id>``)                            | value      | written by                 |
|-------------------------------------------------|------------|----------------------------|
| ``operating.podopslifecycle.kusionstack.io``    | nanos      | operation controller begin |
| ``operation-type.podopslifecycle.kusionstack.io`` | type     | operation controller begin |
| ``undo-operation-type.podopslifecycle...``      | type       | operation controller undo  |
| ``done-operation-type.podopslifecycle...``      | type       | state machine (operated)   |
| ``pre-check.podopslifecycle.kusionstack.io``    | nanos      | state machine              |
| ``pre-checked.podopslifecycle.kusionstack.io``  | nanos      | lifecycle controller       |
| ``preparing.podopslifecycle.kusionstack.io``    | nanos      | state machine              |
| ``operate.podopslifecycle.kusionstack.io``      | nanos      | state machine              |
| ``operated.podopslifecycle.kusionstack.io``     | nanos      | state machine              |
| ``post-check.podopslifecycle.kusionstack.io``   | nanos      | state machine              |
| ``post-checked.podopslifecycle.kusionstack.io`` | nanos      | lifecycle controller       |
| ``completing.podopslifecycle.kusionstack.io``   | nanos      | state machine              |

Per-type: ``operation-permission.podopslifecycle.kusionstack.io/<type>`` = nanos.
"""

from __future__ import annotations

from typing import Final, NewType

OperationId = NewType("OperationId", str)
OperationType = NewType("OperationType", str)

DOMAIN: Final = "podopslifecycle.kusionstack.io"

OPERATING: Final = f"operating.{DOMAIN}"
OPERATION_TYPE: Final = f"operation-type.{DOMAIN}"
UNDO_OPERATION_TYPE: Final = f"undo-operation-type.{DOMAIN}"
DONE_OPERATION_TYPE: Final = f"done-operation-type.{DOMAIN}"
PRE_CHECK: Final = f"pre-check.{DOMAIN}"
PRE_CHECKED: Final = f"pre-checked.{DOMAIN}"
PREPARING: Final = f"preparing.{DOMAIN}"
OPERATE: Final = f"operate.{DOMAIN}"
OPERATED: Final = f"operated.{DOMAIN}"
POST_CHECK: Final = f"post-check.{DOMAIN}"
POST_CHECKED: Final = f"post-checked.{DOMAIN}"
COMPLETING: Final = f"completing.{DOMAIN}"

#: Prefixes of the labels keyed by operation id, in the reference's order.
ID_PREFIXES: Final[tuple[str, ...]] = (
    OPERATING,
    OPERATION_TYPE,
    PRE_CHECK,
    PRE_CHECKED,
    PREPARING,
    DONE_OPERATION_TYPE,
    UNDO_OPERATION_TYPE,
    OPERATE,
    OPERATED,
    POST_CHECK,
    POST_CHECKED,
    COMPLETING,
)

#: Keyed by operation type, not id.
OPERATION_PERMISSION: Final = f"operation-permission.{DOMAIN}"

SERVICE_AVAILABLE: Final = f"{DOMAIN}/service-available"
STAY_OFFLINE: Final = f"{DOMAIN}/stay-offline"
TO_DELETE: Final = f"{DOMAIN}/to-delete"
TO_REPLACE: Final = f"{DOMAIN}/to-replace"
PREPARING_TO_DELETE: Final = f"{DOMAIN}/preparing-to-delete"

CONTROL: Final = "kusionstack.io/control"
CONTROL_VALUE: Final = "true"

#: Readiness gate and pod condition type flipped by the lifecycle controller.
SERVICE_READY: Final = "pod.kusionstack.io/service-ready"
SERVICE_READY_MESSAGE: Final = "updated by PodOpsLifecycle"

#: Any finalizer starting with this holds the pod in Preparing / Completing.
PROTECTION_FINALIZER_PREFIX: Final = "prot.podopslifecycle.kusionstack.io"

#: JSON ``{"expectedFinalizers": {"<key>": "<finalizer>"}}``.
AVAILABLE_CONDITIONS: Final = "pod.kusionstack.io/available-conditions"

#: Built-in operation types.
UPDATE: Final = OperationType("update")
SCALE_IN: Final = OperationType("scale-in")
DELETE: Final = OperationType("delete")


def id_key(prefix: str, op_id: str) -> str:
    """The label key of ``prefix`` for one operation id."""
    return f"{prefix}/{op_id}"


def permission_key(op_type: str) -> str:
    """The per-type operation-permission label key."""
    return f"{OPERATION_PERMISSION}/{op_type}"


def is_controlled(labels: dict[str, str] | None) -> bool:
    """Pods without ``kusionstack.io/control: "true"`` are ignored by every part of the lifecycle."""
    return (labels or {}).get(CONTROL) == CONTROL_VALUE


def lifecycle_id(name: str) -> str:
    """An operation id from a name: the name when it fits a label-name segment, else its FNV-32a hash.

    Same rule as Operating's ``GenerateLifecycleID`` so ids derived from long names match.
    """
    if len(name) <= 63:
        return name
    h = 0x811C9DC5
    for byte in name.encode():
        h ^= byte
        h = (h * 0x01000193) & 0xFFFFFFFF
    return f"0x{h:x}"

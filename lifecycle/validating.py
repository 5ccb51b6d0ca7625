"""The validating webhook's checks on a pod's lifecycle labels and annotations (pure).

The admission layer calls :func:`validate` on the pod as it would be stored (after
the mutating step) for CREATE and UPDATE of controlled pods, and denies the request
with the messages joined when the list is not empty. The checks are Operating's
(ref. §2.5): they catch operators and hand edits that would leave the lifecycle in a
state the state machine cannot take forward. Each message names the offending key and
says what to fix.
"""

from __future__ import annotations

from collections.abc import Mapping

from lifecycle.finalizers import AvailableConditionsError, parse_expected_finalizers
from lifecycle.labels import DONE_OPERATION_TYPE, OPERATED, OPERATION_PERMISSION, PRE_CHECKED, id_key
from lifecycle.states import InvalidLifecycleLabel, split_lifecycle_key


def validate(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> list[str]:
    """Every problem found, as messages; ``[]`` means the pod is acceptable.

    * the ``pod.kusionstack.io/available-conditions`` annotation must be JSON of the
      form ``{"expectedFinalizers": {"<key>": "<finalizer>"}}``;
    * a label with a lifecycle prefix must be ``<prefix>/<id>`` (``invalid label <key>``);
    * ``operated/<id>`` and ``done-operation-type/<id>`` come together;
    * some ``pre-checked.*`` label exists iff some ``operation-permission.*`` label does.
    """
    errors: list[str] = []
    try:
        parse_expected_finalizers(annotations)
    except AvailableConditionsError as exc:
        errors.append(str(exc))

    by_prefix: dict[str, set[str]] = {}
    for key in sorted(labels or {}):
        try:
            split = split_lifecycle_key(key)
        except InvalidLifecycleLabel as exc:
            errors.append(
                f"{exc}: lifecycle labels are keyed <prefix>/<operation id> "
                f"({OPERATION_PERMISSION}/<operation type> for permissions); rename or remove it"
            )
            continue
        if split is not None:
            prefix, suffix = split
            by_prefix.setdefault(prefix, set()).add(suffix)

    errors.extend(_pair_errors(by_prefix, OPERATED, DONE_OPERATION_TYPE))
    errors.extend(_pair_errors(by_prefix, DONE_OPERATION_TYPE, OPERATED))

    pre_checked = sorted(by_prefix.get(PRE_CHECKED, ()))
    permissions = sorted(by_prefix.get(OPERATION_PERMISSION, ()))
    if pre_checked and not permissions:
        keys = [id_key(PRE_CHECKED, i) for i in pre_checked]
        errors.append(
            f"not found the expected label prefix {OPERATION_PERMISSION}: {keys} present; "
            f"pre-checked operations need {OPERATION_PERMISSION}/<operation type> "
            "(add it or remove the pre-checked labels)"
        )
    if permissions and not pre_checked:
        keys = [id_key(OPERATION_PERMISSION, t) for t in permissions]
        errors.append(
            f"not found the expected label prefix {PRE_CHECKED}: {keys} present; an operation permission "
            f"is only held by pre-checked operations (add {PRE_CHECKED}/<operation id> or remove the "
            "permission labels)"
        )
    return errors


def _pair_errors(by_prefix: Mapping[str, set[str]], present: str, required: str) -> list[str]:
    """Messages for ids carrying ``present/<id>`` but not ``required/<id>``."""
    return [
        f"not found label {id_key(required, op_id)}: {id_key(present, op_id)} is present and needs it "
        f"(add {id_key(required, op_id)} or remove {id_key(present, op_id)})"
        for op_id in sorted(by_prefix.get(present, set()) - by_prefix.get(required, set()))
    ]

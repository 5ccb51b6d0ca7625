"""The protocol's floor: the fewest API writes one in-place update of one pod can take.

Derived, not guessed, by running the pure state machine (:mod:`lifecycle.advancing`) and
the operation library (:mod:`lifecycle.operations`) against an idealised world:

* every actor makes **one request per decision** (no retries, no 409s, no redundant writes);
* the operator's mutating webhooks fold :func:`~lifecycle.advancing.settle` into every
  write to the pod, including ``pods/status`` writes (the API server keeps label changes
  made there), so a step that needs no new fact rides on the write that unlocked it;
* the kubelet (kwok here) writes status when readiness or the running image changes;
  its writes are free carriers for folded steps and are not counted as the operator's;
* PodTransitionRules pass at once (a budget only delays the approval, it adds no write).

What remains are the writes only an actor can make because a *new fact* is needed:
the operation controller's ``begin``, its work (the image patch) and ``finish``, and the
lifecycle controller's rule approvals (PreCheck, PostCheck) with the ``service-ready``
condition each implies. :func:`floor_in_place_update` returns them in order, for two
ways of writing the lifecycle controller's decision: labels and condition in one
``pods/status`` patch (as :func:`rollouts.operator.handlers.lifecycle.write_patch` does
since issue 8), or a label patch followed by a status patch (as it did before).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lifecycle import labels as L
from lifecycle.advancing import PodFacts, settle
from lifecycle.operations import LabelAdapter, allow_ops, begin, finish, is_during_ops

ADAPTER = LabelAdapter(id=L.OperationId("collaset-update"), type=L.UPDATE)
NOW = 1_700_000_000_000_000_000


@dataclass
class _Pod:
    labels: dict[str, str]
    service_ready: bool = True
    ready: bool = True
    image_new: bool = False
    running_new: bool = False
    finished: bool = False

    def facts(self, *, previous: dict[str, str] | None = None) -> PodFacts:
        return PodFacts(
            labels=self.labels,
            has_readiness_gate=True,
            service_ready=self.service_ready,
            ready=self.ready,
            pre_check_passed=True,
            post_check_passed=True,
            previous_labels=previous,
        )


@dataclass(frozen=True)
class Floor:
    #: Operator requests in order, e.g. ``["begin (pods)", "approve PreCheck (pods/status)", ...]``.
    writes: list[str] = field(default_factory=list)
    #: Writes by the kubelet that carried a folded lifecycle step.
    carried_by_kubelet: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.writes)


def _write(pod: _Pod, new_labels: dict[str, str]) -> None:
    """One request to the pod: its own label change plus what the mutating webhook folds in."""
    previous = pod.labels
    pod.labels = new_labels
    folded = settle(pod.facts(previous=previous), now_ns=NOW)
    pod.labels = folded.labels.apply(pod.labels)


def floor_in_place_update(*, condition_with_labels: bool = True, max_rounds: int = 40) -> Floor:
    """Simulate one in-place update of a service-available pod; see the module docstring."""
    pod = _Pod(labels={L.CONTROL: L.CONTROL_VALUE, L.SERVICE_AVAILABLE: "1"})
    writes: list[str] = []
    carried: list[str] = []
    for _ in range(max_rounds):
        # The operation controller (a CollaSet): begin, do the work, finish.
        if not pod.finished:
            if not is_during_ops(ADAPTER, pod.labels):
                _write(pod, begin(ADAPTER, pod.labels, now_ns=NOW).apply(pod.labels))
                writes.append("begin (pods)")
            elif allow_ops(ADAPTER, pod.labels, now_ns=NOW).allowed and not pod.image_new:
                pod.image_new = True
                _write(pod, dict(pod.labels))
                writes.append("in-place image update (pods)")
            elif pod.running_new and allow_ops(ADAPTER, pod.labels, now_ns=NOW).allowed:
                _write(pod, finish(ADAPTER, pod.labels).apply(pod.labels))
                pod.finished = True
                writes.append("finish (pods)")
        # The lifecycle controller: rule approvals and the service-ready condition.
        decided = settle(pod.facts(), now_ns=NOW)
        step = (decided.reasons[:1] or ("lifecycle step",))[0]
        if decided.service_ready is not None:
            new_labels = decided.labels.apply(pod.labels)
            if condition_with_labels or decided.labels.is_empty:
                pod.service_ready = decided.service_ready
                _write(pod, new_labels)
                writes.append(f"{step} + service-ready={decided.service_ready} (pods/status)")
            else:
                _write(pod, new_labels)
                writes.append(f"{step} (pods)")
                pod.service_ready = decided.service_ready
                _write(pod, dict(pod.labels))
                writes.append(f"service-ready={decided.service_ready} (pods/status)")
        elif not decided.labels.is_empty:
            _write(pod, decided.labels.apply(pod.labels))
            writes.append(f"{step} (pods)")
        # The kubelet: Ready follows the readiness gate; a new image gets running.
        if pod.ready != pod.service_ready:
            pod.ready = pod.service_ready
            before = dict(pod.labels)
            _write(pod, dict(pod.labels))
            carried.append(
                f"Ready={pod.ready}" + (" (carried a lifecycle step)" if before != pod.labels else "")
            )
        if pod.image_new and not pod.running_new:
            pod.running_new = True
            before = dict(pod.labels)
            _write(pod, dict(pod.labels))
            carried.append(
                "new image running" + (" (carried a lifecycle step)" if before != pod.labels else "")
            )
        done = pod.finished and set(pod.labels) == {L.CONTROL, L.SERVICE_AVAILABLE}
        if done and pod.ready:
            return Floor(writes=writes, carried_by_kubelet=carried)
    raise RuntimeError(f"the simulated update did not complete in {max_rounds} rounds: {pod}")


def describe() -> dict[str, object]:
    """The floor as the suite's JSON reports it."""
    combined = floor_in_place_update(condition_with_labels=True)
    separate = floor_in_place_update(condition_with_labels=False)
    return {
        "writes_per_pod": combined.count,
        "writes": combined.writes,
        "kubelet_writes": combined.carried_by_kubelet,
        "writes_per_pod_label_then_status": separate.count,
        "explanation": (
            "Fewest operator requests for one in-place update, from the state machine "
            "(lifecycle.advancing.settle) and the operation library, with the mutating webhooks folding "
            "every step that needs no new fact into the write that unlocked it (kubelet status writes "
            "included). Needed: begin, the in-place image patch, finish (operation controller), and the "
            "PreCheck and PostCheck approvals, each with the service-ready condition they imply (lifecycle "
            "controller). The 'label_then_status' variant writes labels and the condition as two requests, "
            "as write_patch did before issue 8."
        ),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(describe(), indent=2))

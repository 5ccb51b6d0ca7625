"""Turning what a scenario saw into figures: percentiles, API requests, transition latencies.

Pure functions over plain data (the operator's request counts, the pod watch's
transitions), so the suite and the smoke test read the same definitions.

Latency (the issue's "from a lifecycle label change to the next transition written"):
on each pod, for every lifecycle transition not written by the benchmark itself, the
time since the pod's previous lifecycle transition (written by anyone), both as the
benchmark's watch received them. Steps are named ``<pod phase before>-><pod phase after>``.
``reaction`` leaves out the steps out of PreCheck when the scenario has a budget: those
wait for the PodTransitionRule to admit the pod, which is the budget working, not the
operator reacting.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bench.podwatch import PodRecord

WRITE_VERBS = ("create", "update", "patch", "delete", "deletecollection")
POD_RESOURCES = ("pods", "pods/status")


def percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile (``p`` in 0..100); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 1)


def api_figures(calls: Mapping[tuple[str, str, str, str], int], pods: int) -> dict[str, Any]:
    """Requests by verb, by ``verb resource``, writes, and per pod."""
    by_verb: dict[str, int] = {}
    by_resource: dict[str, int] = {}
    errors: dict[str, int] = {}
    writes = pod_writes = total = 0
    for (verb, group, resource, code), n in sorted(calls.items()):
        total += n
        by_verb[verb] = by_verb.get(verb, 0) + n
        name = f"{verb} {resource}" + (f".{group}" if group else "")
        by_resource[name] = by_resource.get(name, 0) + n
        if not code.startswith("2"):
            errors[f"{name} {code}"] = errors.get(f"{name} {code}", 0) + n
        if verb in WRITE_VERBS:
            writes += n
            if resource in POD_RESOURCES and not group:
                pod_writes += n
    per_pod = (lambda n: round(n / pods, 2)) if pods else (lambda n: None)
    return {
        "total": total,
        "by_verb": by_verb,
        "by_resource": by_resource,
        "not_2xx": errors,
        "writes": writes,
        "pod_writes": pod_writes,
        "requests_per_pod": per_pod(total),
        "writes_per_pod": per_pod(writes),
        "pod_writes_per_pod": per_pod(pod_writes),
        "lists": by_verb.get("list", 0),
        "gets": by_verb.get("get", 0),
    }


def latency_figures(records: Iterable[PodRecord], *, since: float, budgeted: bool) -> dict[str, Any]:
    """p50/p99 of label change -> next operator transition, overall, as reaction, and by step."""
    overall: list[float] = []
    reaction: list[float] = []
    by_step: dict[str, list[float]] = {}
    first: list[float] = []
    per_pod: list[int] = []
    for record in records:
        steps = [t for t in record.transitions if t.at >= since]
        per_pod.append(len(steps))
        if steps and not steps[0].bench:
            first.append(steps[0].at - since)
        for previous, current in itertools.pairwise(steps):
            if current.bench:
                continue
            delay = current.at - previous.at
            name = f"{current.phase_before}->{current.phase_after}"
            overall.append(delay)
            by_step.setdefault(name, []).append(delay)
            if not (budgeted and current.phase_before == "PreCheck"):
                reaction.append(delay)
    return {
        "p50_ms": ms(percentile(overall, 50)),
        "p99_ms": ms(percentile(overall, 99)),
        "count": len(overall),
        "reaction_p50_ms": ms(percentile(reaction, 50)),
        "reaction_p99_ms": ms(percentile(reaction, 99)),
        "reaction_count": len(reaction),
        "first_transition_p50_ms": ms(percentile(first, 50)),
        "first_transition_p99_ms": ms(percentile(first, 99)),
        "by_step": {
            name: {"p50_ms": ms(percentile(v, 50)), "p99_ms": ms(percentile(v, 99)), "count": len(v)}
            for name, v in sorted(by_step.items())
        },
        "transitions_per_pod_p50": percentile([float(n) for n in per_pod], 50),
    }


def writes_seen(writes: Mapping[str, int], pods: int) -> dict[str, float]:
    """Pod versions by writer, per pod, as the watch saw them."""
    return {writer: round(n / pods, 2) for writer, n in sorted(writes.items())} if pods else {}

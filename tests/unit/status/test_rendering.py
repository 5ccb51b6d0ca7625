"""rollouts.status rendering: plain keyed lines, printing only what changed, and the rich live view."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from lifecycle import labels as lc
from rollouts.status import PlainDisplay, changed_lines, render_live, render_plain, view_rollout
from tests.unit.status.builders import NEW, OLD, collaset, condition, hook, in_phase, pod, rolling

ROLLING = rolling(
    updated=2,
    available=1,
    hooks=[hook("pre", 0, "Succeeded", job="web-pre-1"), hook("mid", 2, "Running", job="web-mid-1")],
)
PODS = [
    pod("web-a"),
    pod("web-b", ready=False, available=False, phase_labels=in_phase(lc.OPERATED, lc.COMPLETING)),
    pod(
        "web-c",
        revision=OLD,
        available=False,
        phase_labels=in_phase(lc.PRE_CHECK, lc.PRE_CHECKED, lc.PREPARING),
    ),
]


def test_plain_lines() -> None:
    assert render_plain(view_rollout(ROLLING, PODS)) == {
        "rollout": f"cls/web: 2/4 updated, 1/4 updated available, revision {OLD} -> {NEW}",
        "waiting": "cls/web: waiting: 2/4 updated, waiting for pod web-b to pass PreCheck",
        "hook/pre": "hook pre (at 0 available pods): Succeeded, job web-pre-1",
        "hook/mid": "hook mid (at 2 available pods): Running, job web-mid-1",
        "pod/web-a": f"pod web-a: new {NEW}, ServiceAvailable, ready, available",
        "pod/web-b": f"pod web-b: new {NEW}, update Completing, not ready, not available",
        "pod/web-c": f"pod web-c: old {OLD}, update Preparing, ready, not available",
    }


def test_plain_complete_has_no_waiting_line() -> None:
    lines = render_plain(view_rollout(collaset(), [pod("web-a")]))
    assert lines["rollout"] == f"cls/web: 4/4 updated, 4/4 updated available, revision {NEW}"
    assert "waiting" not in lines


def test_plain_failed_hook_says_why() -> None:
    failed = hook("smoke", 2, "Failed", job="web-smoke-1")
    failed["message"] = "job web-smoke-1 failed: BackoffLimitExceeded"
    lines = render_plain(view_rollout(rolling(updated=2, available=2, hooks=[failed]), []))
    assert lines["hook/smoke"] == (
        "hook smoke (at 2 available pods): Failed, job web-smoke-1 "
        "(job web-smoke-1 failed: BackoffLimitExceeded)"
    )


@pytest.mark.parametrize(
    ("before", "after", "printed"),
    [
        pytest.param({}, {"a": "1", "b": "2"}, ["1", "2"], id="first-view-prints-all"),
        pytest.param({"a": "1", "b": "2"}, {"a": "1", "b": "2"}, [], id="nothing-changed"),
        pytest.param({"a": "1", "b": "2"}, {"a": "1", "b": "3"}, ["3"], id="one-changed"),
        pytest.param({"a": "1"}, {"a": "1", "pod/x": "x up"}, ["x up"], id="new-pod"),
        pytest.param({"a": "1", "pod/x": "x up"}, {"a": "1"}, ["pod x: gone"], id="pod-gone"),
        pytest.param({"a": "1", "waiting": "w"}, {"a": "1"}, [], id="waiting-over-is-silent"),
    ],
)
def test_changed_lines(before: dict[str, str], after: dict[str, str], printed: list[str]) -> None:
    assert changed_lines(before, after) == printed


def test_plain_display_prints_one_line_per_change_without_ansi() -> None:
    out = io.StringIO()
    display = PlainDisplay(out=out)
    display.show(view_rollout(ROLLING, PODS))
    first = out.getvalue().splitlines()
    display.show(view_rollout(ROLLING, PODS))
    assert out.getvalue().splitlines() == first  # the same view prints nothing more
    done = collaset(
        hooks=[hook("pre", 0, "Succeeded", job="web-pre-1"), hook("mid", 2, "Succeeded", job="web-mid-1")]
    )
    display.show(view_rollout(done, [pod("web-a"), pod("web-b"), pod("web-c")]))
    more = out.getvalue().splitlines()[len(first) :]
    assert more == [
        f"cls/web: 4/4 updated, 4/4 updated available, revision {NEW}",
        "hook mid (at 2 available pods): Succeeded, job web-mid-1",
        f"pod web-b: new {NEW}, ServiceAvailable, ready, available",
        f"pod web-c: new {NEW}, ServiceAvailable, ready, available",
    ]
    assert "\x1b" not in out.getvalue()


def _text(view_body: dict[str, object], pods: list[dict[str, object]]) -> str:
    console = Console(width=140, record=True, file=io.StringIO(), color_system=None)
    console.print(render_live(view_rollout(view_body, pods)))
    return console.export_text()


def test_live_view_shows_bars_hook_wait_and_pods() -> None:
    text = _text(ROLLING, PODS)
    assert f"ns/web  revision {OLD} -> {NEW}" in text
    assert "2/4" in text and "1/4" in text
    assert "mid (at 2 available pods) Running  job web-mid-1" in text
    assert "waiting   2/4 updated, waiting for pod web-b to pass PreCheck" in text
    assert "update Preparing" in text and "update Completing" in text
    assert "result" not in text


@pytest.mark.parametrize(
    ("body", "result"),
    [
        pytest.param(collaset(), "rollout complete: 4 of 4 pods updated and available", id="complete"),
        pytest.param(
            rolling(
                updated=2, available=2, conditions=[condition("Failed", "True", "HookFailed", "smoke failed")]
            ),
            "rollout failed: smoke failed",
            id="failed",
        ),
        pytest.param(
            rolling(
                updated=1,
                available=1,
                conditions=[condition("Progressing", "False", "ProgressDeadlineExceeded", "stuck 60s")],
            ),
            "progress deadline exceeded: stuck 60s",
            id="deadline",
        ),
    ],
)
def test_live_view_ends_with_the_result(body: dict[str, object], result: str) -> None:
    assert f"result    {result}" in _text(body, [])

"""rollouts status arguments: the target, durations, kubectl-style booleans and label selectors."""

from __future__ import annotations

from typing import Any

import pytest

from rollouts.cli import build_parser, main
from rollouts.status import StatusError, parse_bool, parse_duration, parse_target, selector_string


@pytest.mark.parametrize(
    ("text", "name"),
    [
        pytest.param("cls/web", "web", id="short-name"),
        pytest.param("collaset/web", "web", id="kind"),
        pytest.param("collasets/web", "web", id="plural"),
        pytest.param("CollaSet/web", "web", id="kind-any-case"),
        pytest.param("collasets.apps.kusionstack.io/web", "web", id="with-group"),
        pytest.param("web", "web", id="bare-name"),
    ],
)
def test_parse_target(text: str, name: str) -> None:
    assert parse_target(text) == name


@pytest.mark.parametrize(
    ("text", "error"),
    [
        pytest.param("deployment/web", "follows CollaSets only", id="other-kind"),
        pytest.param("cls/", "expected cls/NAME", id="no-name"),
        pytest.param("cls/a/b", "expected cls/NAME", id="two-slashes"),
    ],
)
def test_parse_target_errors(text: str, error: str) -> None:
    with pytest.raises(StatusError, match=error):
        parse_target(text)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("0s", None, id="zero-means-forever"),
        pytest.param("0", None, id="bare-zero"),
        pytest.param("90", 90.0, id="bare-seconds"),
        pytest.param("90s", 90.0, id="seconds"),
        pytest.param("5m", 300.0, id="minutes"),
        pytest.param("1h30m", 5400.0, id="hours-and-minutes"),
        pytest.param("1m30s", 90.0, id="minutes-and-seconds"),
        pytest.param("250ms", 0.25, id="milliseconds"),
        pytest.param("1.5s", 1.5, id="fraction"),
    ],
)
def test_parse_duration(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "m5", "5m junk", "-5s"])
def test_parse_duration_errors(text: str) -> None:
    with pytest.raises(StatusError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("true", True, id="true"),
        pytest.param("false", False, id="false"),
        pytest.param("=false", False, id="short-flag-equals"),
        pytest.param("FALSE", False, id="any-case"),
        pytest.param("1", True, id="one"),
        pytest.param("0", False, id="zero"),
    ],
)
def test_parse_bool(text: str, value: bool) -> None:
    assert parse_bool(text) is value


def test_parse_bool_error() -> None:
    with pytest.raises(StatusError, match="invalid boolean"):
        parse_bool("maybe")


@pytest.mark.parametrize(
    ("selector", "query"),
    [
        pytest.param(None, "", id="none"),
        pytest.param({"matchLabels": {"app": "web", "tier": "fe"}}, "app=web,tier=fe", id="labels"),
        pytest.param(
            {
                "matchLabels": {"app": "web"},
                "matchExpressions": [
                    {"key": "env", "operator": "In", "values": ["a", "b"]},
                    {"key": "zone", "operator": "NotIn", "values": ["x"]},
                    {"key": "canary", "operator": "DoesNotExist"},
                    {"key": "team", "operator": "Exists"},
                ],
            },
            "app=web,env in (a,b),zone notin (x),!canary,team",
            id="expressions",
        ),
    ],
)
def test_selector_string(selector: dict[str, Any] | None, query: str) -> None:
    assert selector_string(selector) == query


@pytest.mark.parametrize(
    ("argv", "target", "watch"),
    [
        pytest.param(["cls/web"], "cls/web", True, id="waits-by-default"),
        pytest.param(["cls/web", "-w"], "cls/web", True, id="w-after"),
        pytest.param(["-w", "cls/web"], "cls/web", True, id="w-before-does-not-swallow-the-target"),
        pytest.param(["cls/web", "-w=false"], "cls/web", False, id="w-equals-false"),
        pytest.param(["-w=false", "cls/web"], "cls/web", False, id="w-equals-false-before"),
        pytest.param(["cls/web", "--watch=false"], "cls/web", False, id="long-equals"),
        pytest.param(["--watch", "false", "cls/web"], "cls/web", False, id="long-separate-value"),
    ],
)
def test_watch_flag(argv: list[str], target: str, watch: bool) -> None:
    args = build_parser().parse_args(["status", *argv])
    assert (args.target or args.swallowed_target, args.watch) == (target, watch)


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        pytest.param(["cls/web", "--watch=maybe"], "invalid value for --watch: 'maybe'", id="bad-watch"),
        pytest.param([], "needs the CollaSet", id="no-target"),
        pytest.param(["cls/web", "--timeout", "soon"], "invalid duration 'soon'", id="bad-timeout"),
        pytest.param(["deploy/web"], "follows CollaSets only", id="other-kind"),
    ],
)
def test_status_command_errors(argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", *argv]) == 1
    assert error in capsys.readouterr().err

"""Profiling the operator child during one scenario, and reading the profile.

``py-spy`` (installed in the venv when available) samples the child from outside at
100 Hz without pausing it (``--nonblocking``) and writes collapsed stacks (``--format
raw``: one line per distinct stack, ``frame;frame;... count``). :func:`summarize` turns
them into the top functions by *inclusive* samples (time spent in a function and what it
calls) and by *self* samples, with the share of all samples, which is what the suite's
JSON carries. ``cprofile`` (no py-spy) is done inside the child, see :mod:`bench.operator_child`.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^:()]+)(?::\d+)?\)$")


def py_spy_path() -> str | None:
    local = Path(sys.executable).with_name("py-spy")
    return str(local) if local.exists() else shutil.which("py-spy")


class PySpy:
    """``py-spy record`` on a process until :meth:`stop`."""

    def __init__(self, pid: int, out: Path, *, rate: int = 100) -> None:
        self.out = out
        binary = py_spy_path()
        if binary is None:
            raise RuntimeError("py-spy is not installed: pip install py-spy, or use --profile cprofile")
        self._proc = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--rate", str(rate), "--nonblocking",
             "--output", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip

    def stop(self) -> None:
        self._proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            _, err = self._proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
        if not self.out.exists():
            raise RuntimeError(f"py-spy wrote no profile: {err.decode(errors='replace')[-400:]}")


def _short(frame: str) -> str:
    """``func (path/to/site-packages/kopf/_core/x.py:12)`` -> ``kopf/_core/x.py:func``."""
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match.group("file")
    for marker in ("site-packages/", "/work/main/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{path}:{match.group('func')}"


def summarize(raw: Path, *, top: int = 25) -> dict[str, Any]:
    """Top functions by inclusive and self samples from a py-spy raw (collapsed) profile."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [_short(f) for f in stack.split(";") if f]
        # the thread name py-spy puts first is not a function
        frames = [f for f in frames if not f.startswith("process ") and not f.startswith("thread ")]
        for name in set(frames):
            inclusive[name] += count
        if frames:
            own[frames[-1]] += count
            packages[_package(frames[-1])] += count

    def table(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "samples": n, "share": round(n / total, 3) if total else 0.0}
            for name, n in counter.most_common(top)
        ]

    return {
        "samples": total,
        "self_by_package": {
            name: round(n / total, 3) if total else 0.0 for name, n in packages.most_common(15)
        },
        "inclusive": table(inclusive),
        "self": table(own),
    }


def _package(frame: str) -> str:
    """The top-level package of a shortened frame (``kopf/_core/x.py:f`` -> ``kopf``)."""
    path = frame.split(":", 1)[0]
    head = path.split("/", 1)[0]
    return head.removesuffix(".py") if "/" in path or path.endswith(".py") else path

"""The operator under benchmark, in a child process of its own.

The suite's own work (creating objects, watching pods, parsing JSON) must not be
charged to the operator, so the operator runs in a process started with
``multiprocessing``'s *spawn* method: its CPU seconds (``getrusage``, every thread) and
peak RSS (``VmHWM``) are its own. The child runs :class:`rollouts.operator.running.OperatorThread`
and answers the parent over a pipe:

* ``("stats", reset)``: the API requests counted by :data:`rollouts.apicalls.API_CALLS`
  since the last reset, CPU seconds since the last reset, current and peak RSS; with
  ``reset`` the counts, the CPU base and the peak RSS (``/proc/self/clear_refs``) start over;
* ``("total",)``: how many requests so far (to wait until the operator is quiet);
* ``("stop",)``: stop the operator like SIGTERM and exit.

``profile="cprofile"`` runs a ``cProfile.Profile`` on the operator's thread and dumps it
at stop; py-spy profiles from outside (see :mod:`bench.profiles`), so needs nothing here.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import resource
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any


@dataclass(frozen=True, kw_only=True)
class OperatorStats:
    #: ``(verb, group, resource, code) -> count`` since the last reset.
    calls: dict[tuple[str, str, str, str], int]
    cpu_seconds: float
    rss_mb: float
    peak_rss_mb: float


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _reset_peak_rss() -> None:
    # Linux >= 4.0: VmHWM := VmRSS. Where it is not allowed the peak spans the whole run.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def _child(conn: Connection, cfg: Any, profile: str | None, profile_out: str | None, log_file: str) -> None:
    """Entry point of the child process (module-level so spawn can import it)."""
    logging.basicConfig(
        filename=log_file, level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    from rollouts.apicalls import API_CALLS
    from rollouts.operator.running import OperatorThread

    profiler: Any = None
    if profile == "cprofile":
        import cProfile

        profiler = cProfile.Profile()
        started = threading.Event()
        original_run = OperatorThread._run

        def profiled_run(self: OperatorThread) -> None:
            profiler.enable()
            started.set()
            try:
                original_run(self)
            finally:
                profiler.disable()

        OperatorThread._run = profiled_run  # type: ignore[method-assign]

    operator = OperatorThread(cfg)
    try:
        operator.start(timeout=120)
    except Exception as e:  # reported to the parent, which raises it
        conn.send(("error", repr(e)))
        return
    conn.send(("ready", os.getpid()))
    cpu_base = _cpu_seconds()
    while True:
        command = conn.recv()
        if command[0] == "stats":
            snapshot = API_CALLS.snapshot()
            stats = OperatorStats(
                calls={(k.verb, k.group, k.resource, k.code): n for k, n in snapshot.items()},
                cpu_seconds=_cpu_seconds() - cpu_base,
                rss_mb=_status_kb("VmRSS") / 1024,
                peak_rss_mb=_status_kb("VmHWM") / 1024,
            )
            if command[1]:
                API_CALLS.reset()
                _reset_peak_rss()
                cpu_base = _cpu_seconds()
            conn.send(stats)
        elif command[0] == "total":
            conn.send(sum(API_CALLS.snapshot().values()))
        elif command[0] == "stop":
            operator.stop(timeout=60)
            if profiler is not None and profile_out:
                profiler.dump_stats(profile_out)
            conn.send("stopped")
            return


class OperatorProcess:
    """The parent's handle on the operator child: start, stats, stop."""

    def __init__(
        self, cfg: Any, *, log_file: Path, profile: str | None = None, profile_out: Path | None = None
    ) -> None:
        self.cfg = cfg
        self.log_file = log_file
        self.profile = profile
        self.profile_out = profile_out
        self._lock = threading.Lock()
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_child,
            args=(child_conn, cfg, profile, str(profile_out) if profile_out else None, str(log_file)),
            name="rollouts-operator",
            daemon=True,
        )
        self.pid: int | None = None

    def start(self, *, timeout: float = 180) -> OperatorProcess:
        self._process.start()
        if not self._conn.poll(timeout):
            self._process.kill()
            raise RuntimeError(f"operator child not ready within {timeout:.0f}s (log: {self.log_file})")
        kind, value = self._conn.recv()
        if kind == "error":
            self._process.join(10)
            raise RuntimeError(f"operator child failed to start: {value} (log: {self.log_file})")
        self.pid = int(value)
        return self

    def _ask(self, *command: Any) -> Any:
        with self._lock:  # called from worker threads (asyncio.to_thread)
            self._conn.send(command)
            return self._conn.recv()

    def stats(self, *, reset: bool) -> OperatorStats:
        stats: OperatorStats = self._ask("stats", reset)
        return stats

    def total_calls(self) -> int:
        return int(self._ask("total"))

    def stop(self, *, timeout: float = 90) -> None:
        if not self._process.is_alive():
            return
        with contextlib.suppress(EOFError, BrokenPipeError):
            self._ask("stop")
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(10)

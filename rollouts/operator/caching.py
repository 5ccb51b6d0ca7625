"""Parsed views of watched objects, kept per object version.

The CollaSet reconciler and the PodTransitionRule worker look at every pod of their owner
or namespace on each pass, and most of those pods did not change since the last pass:
parsing them anew made a pass O(pods) in parsing alone. An object's ``(uid,
resourceVersion)`` names one immutable state, so a view computed from it can be reused
until the object changes. Objects without both (built by hand in tests) are not cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

#: Views kept before the cache starts afresh (a few per pod: old versions go unused).
DEFAULT_LIMIT: Final = 50_000


class ByVersion(Generic[T]):
    """``make(obj)``, remembered per ``(uid, resourceVersion)`` of ``obj``.

    ``make`` must be a pure function of the object, and its result must not be changed by
    callers (the same value is handed to every caller of that version).
    """

    def __init__(self, make: Callable[[Mapping[str, Any]], T], *, limit: int = DEFAULT_LIMIT) -> None:
        self._make = make
        self._limit = limit
        self._values: dict[tuple[str, str], T] = {}
        self.hits = 0
        self.misses = 0

    def __call__(self, obj: Mapping[str, Any]) -> T:
        meta = obj.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return self._make(obj)
        key = (str(uid), str(version))
        try:
            value = self._values[key]
        except KeyError:
            self.misses += 1
            if len(self._values) >= self._limit:
                self._values.clear()
            value = self._values[key] = self._make(obj)
            return value
        self.hits += 1
        return value

    def __len__(self) -> int:
        return len(self._values)

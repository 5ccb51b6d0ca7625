"""Parsed views of watched objects, kept for the latest version of each object.

The CollaSet reconciler and the PodTransitionRule worker look at every pod of their owner
or namespace on each pass, and most of those pods did not change since the last pass:
parsing them anew made a pass O(pods) in parsing alone. An object's ``(uid,
resourceVersion)`` names one immutable state, so a view computed from it can be reused
until the object changes. Only the latest version seen of each object is kept, so the cache
holds one view per object (a view may keep a reference to the object it came from). Objects
without both (built by hand in tests) are not cached.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

#: Objects kept before the cache starts afresh (deleted objects are only dropped then).
DEFAULT_LIMIT: Final = 20_000


class ByVersion(Generic[T]):
    """``make(obj)``, remembered for the latest ``resourceVersion`` seen of each ``uid``.

    ``make`` must be a pure function of the object, and its result must not be changed by
    callers (the same value is handed to every caller of that version).
    """

    def __init__(self, make: Callable[[Mapping[str, Any]], T], *, limit: int = DEFAULT_LIMIT) -> None:
        self._make = make
        self._limit = limit
        self._values: dict[str, tuple[str, T]] = {}
        self.hits = 0
        self.misses = 0

    def __call__(self, obj: Mapping[str, Any]) -> T:
        meta = obj.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return self._make(obj)
        uid, version = str(uid), str(version)
        kept = self._values.get(uid)
        if kept is not None and kept[0] == version:
            self.hits += 1
            return kept[1]
        self.misses += 1
        if kept is None and len(self._values) >= self._limit:
            self._values.clear()
        value = self._make(obj)
        self._values[uid] = (version, value)
        return value

    def __len__(self) -> int:
        return len(self._values)

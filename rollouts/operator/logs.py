"""Operator log output: human text or one JSON object per line (``rollouts run --log-format``).

Controllers log one line per decision (never per unchanged reconcile) and pass what the line
is about as ``extra`` fields, which the JSON format emits as keys:

* ``object``: ``<kind>/<namespace>/<name>`` of the object decided about;
* ``operation``: the lifecycle operation ids concerned, when there are any;
* ``reason``: why, in words.

kopf's own object-scoped log lines carry the object they are about (``k8s_ref``), which the
JSON format turns into ``object`` too. The text format prints the message, which already
names the object.

Quiet by design: kopf's "Handler ... succeeded." / "Webhook ... succeeded." (one per watch
event and per admission request) and the webhook server's access log are dropped; kopf's
retries, failures and warnings stay.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
from collections.abc import Mapping
from typing import Any, Final

FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: ``extra`` keys copied into JSON lines.
FIELDS: Final = ("object", "operation", "reason", "controller")


def _object_of(ref: object) -> str | None:
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    kind = str(ref.get("kind") or "object").lower()
    namespace = ref.get("namespace")
    return f"{kind}/{namespace}/{ref['name']}" if namespace else f"{kind}/{ref['name']}"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the decision fields."""

    def format(self, record: logging.LogRecord) -> str:
        moment = datetime.datetime.fromtimestamp(record.created, tz=datetime.UTC)
        document: dict[str, Any] = {
            "time": moment.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        kopf_object = _object_of(getattr(record, "k8s_ref", None))
        if kopf_object is not None:
            document["object"] = kopf_object
        for key in FIELDS:
            value = getattr(record, key, None)
            if value is not None and value != [] and value != "":
                document[key] = value
        if record.exc_info:
            document["exception"] = self.formatException(record.exc_info)
        return json.dumps(document, default=str)


_ROUTINE: Final = re.compile(r"^(Handler|Webhook) '[^']*' succeeded\.$")


def is_routine(record: logging.LogRecord) -> bool:
    """kopf's line per successful handler call: one per watch event or admission request."""
    return record.name.startswith("kopf.") and bool(_ROUTINE.match(str(record.msg)))


def configure(log_format: str = "text", *, level: int = logging.INFO) -> None:
    """Send the root logger's records to stderr in ``log_format`` (``text`` or ``json``)."""
    if log_format not in FORMATS:
        raise ValueError(f"unknown log format {log_format!r}: use one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    handler.addFilter(lambda record: not is_routine(record))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def decision(
    kind: str, namespace: str | None, name: str, *, operations: list[str] | None = None
) -> dict[str, Any]:
    """The ``extra`` of a decision log line about one object."""
    found: dict[str, Any] = {"object": f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"}
    if operations:
        found["operation"] = operations
    return found

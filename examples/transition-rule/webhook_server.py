"""A PodTransitionRule webhook server for the sample rule's ``webhookCheck`` (standard library only).

Run it next to the operator (the rule calls ``http://127.0.0.1:8089``)::

    python3 examples/transition-rule/webhook_server.py [--port 8089]

It speaks the rule webhook protocol with polling: ``POST /post-stop`` receives the pods in
PostCheck and answers with a task id; ``GET /fetch-result?task-id=<id>`` answers with the
pods approved so far. Here every pod the operator sent is approved at the first poll; a real
server would check each pod (its ``podIP`` parameter is in the request) before finishing.
Each request is printed on one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

#: Task id -> names of the pods sent with it.
TASKS: dict[str, list[str]] = {}
_LOCK = threading.Lock()


class RuleWebhook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        if urlsplit(self.path).path != "/post-stop":
            self._answer({"success": False, "message": f"no route {self.path}"}, status=404)
            return
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        pods = [str(r.get("name")) for r in request.get("resources") or []]
        task = uuid.uuid4().hex[:12]
        with _LOCK:
            TASKS[task] = pods
        described = ",".join(
            f"{r.get('name')}({(r.get('parameters') or {}).get('podIP', '?')})"
            for r in request.get("resources") or []
        )
        print(f"POST /post-stop stage={request.get('stage')} pods={described} -> task {task}", flush=True)
        self._answer({"success": True, "poll": True, "taskId": task, "message": f"checking {len(pods)} pods"})

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path != "/fetch-result":
            self._answer({"success": False, "message": f"no route {self.path}"}, status=404)
            return
        task = (parse_qs(parts.query).get("task-id") or [""])[0]
        with _LOCK:
            pods = TASKS.pop(task, None)
        if pods is None:
            print(f"GET /fetch-result task-id={task} -> unknown task", flush=True)
            self._answer({"success": False, "message": f"unknown task {task!r}"})
            return
        print(f"GET /fetch-result task-id={task} -> finished {','.join(pods)}", flush=True)
        self._answer(
            {"success": True, "finished": True, "finishedNames": pods, "message": "all checks passed"}
        )

    def _answer(self, document: dict[str, Any], *, status: int = 200) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default access log: each handler prints its own line."""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8089)
    args = parser.parse_args(argv)
    server = ThreadingHTTPServer((args.host, args.port), RuleWebhook)
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    sys.exit(0)


if __name__ == "__main__":
    main()

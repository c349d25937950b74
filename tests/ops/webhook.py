"""A real HTTP server on a loopback address that records what Apprise's ``json://`` target posts.

The tests point PIPPA_NOTIFY at it (``json://127.0.0.1:PORT/hook/<token>``); ``status`` decides what
it answers (200, or 500 for a failing service).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Post:
    path: str
    body: bytes
    received: float  # time.time() when the request arrived

    @property
    def json(self) -> dict[str, Any]:
        return dict(json.loads(self.body))

    @property
    def fields(self) -> dict[str, str]:
        """The message's ``field: value`` lines (pippa_ops.alerts.hostalerts.message)."""
        out = {}
        for line in str(self.json["message"]).splitlines():
            key, _, value = line.partition(": ")
            out[key] = value
        return out


@dataclass
class Webhook:
    address: str
    port: int
    status: int = 200
    posts: list[Post] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def url(self, token: str) -> str:
        return f"json://{self.address}:{self.port}/hook/{token}"

    def wait_for(self, pred: Callable[[Post], bool], timeout: float = 30.0) -> Post:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for p in self.posts:
                    if pred(p):
                        return p
                left = deadline - time.monotonic()
                assert left > 0, f"no matching post within {timeout}s; got {[p.json for p in self.posts]}"
                self.cond.wait(left)


@contextmanager
def serve(address: str = "127.0.0.1", status: int = 200) -> Iterator[Webhook]:
    hook = Webhook(address=address, port=0, status=status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with hook.cond:
                hook.posts.append(Post(self.path, body, time.time()))
                hook.cond.notify_all()
            self.send_response(hook.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, 0), Handler)
    hook.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield hook
    finally:
        server.shutdown()
        server.server_close()

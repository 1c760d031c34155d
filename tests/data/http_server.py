"""A real HTTP server on 127.0.0.1 (a free port) serving bytes the test gives, for the download tests.

It answers ``Range: bytes=N-`` with ``206 Partial Content`` (unless ``ranges`` is off), records every request's
path and Range header, and can cut a response short: ``cut[path] = n`` sends the full ``Content-Length`` but
only the first ``n`` bytes, then closes the connection (once), as a dropped transfer does.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Served", "serve", "task_zip", "md5", "sha256"]


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Served:
    """What the server serves and what it saw."""

    files: dict[str, bytes] = field(default_factory=dict)
    """URL path (``/scifact.zip``) → content"""
    cut: dict[str, int] = field(default_factory=dict)
    """path → bytes sent before the connection drops (applies once, then removed)"""
    ranges: bool = True
    """honour Range requests (False: always 200 with the whole file)"""
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    """(path, Range header) of every GET"""
    url: str = ""
    """the base address, ``http://127.0.0.1:PORT/``"""


def _handler(state: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep the test output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 - the http.server hook
            path = self.path.split("?", 1)[0]
            state.requests.append((path, self.headers.get("Range")))
            data = state.files.get(path)
            if data is None:
                self.send_error(404)
                return
            start = 0
            rng = self.headers.get("Range")
            if rng and state.ranges and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Accept-Ranges", "bytes" if state.ranges else "none")
            self.end_headers()
            if path in state.cut:
                n = state.cut.pop(path)
                self.wfile.write(body[:n])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


@contextmanager
def serve(state: Served | None = None) -> Iterator[Served]:
    """Serve ``state.files`` on 127.0.0.1 in a thread for the ``with`` block; ``state.url`` is its address."""
    state = state if state is not None else Served()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def task_zip(top: str | None = "scifact", *, with_corpus: bool = True, extra: dict[str, bytes] | None = None) -> bytes:
    """A zip laid out as BEIR's: ``<top>/corpus.jsonl``, ``<top>/queries.jsonl``, ``<top>/qrels/test.tsv``."""
    prefix = f"{top}/" if top else ""
    corpus = [{"_id": "d1", "title": "Cats", "text": "Cats purr."}, {"_id": "d2", "title": "", "text": "Dogs bark."}]
    queries = [{"_id": "q1", "text": "what purrs"}, {"_id": "q2", "text": "what barks"}]
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        if with_corpus:
            zf.writestr(prefix + "corpus.jsonl", "".join(json.dumps(r) + "\n" for r in corpus))
        zf.writestr(prefix + "queries.jsonl", "".join(json.dumps(r) + "\n" for r in queries))
        zf.writestr(prefix + "qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n")
        for name, data in (extra or {}).items():
            zf.writestr(name, data)
    return buf.getvalue()

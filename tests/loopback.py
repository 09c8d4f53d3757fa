"""A file server on loopback for tests and benchmarks: with HTTP range support (206 Partial Content), or one
that ignores ``Range`` and always sends the whole file, as some servers do."""

from __future__ import annotations

import http.server
import re
import threading
from pathlib import Path


class _Handler(http.server.SimpleHTTPRequestHandler):
    ranges = True

    def log_message(self, *args) -> None:
        pass

    def send_head(self):  # type: ignore[override]
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", ""))
        path = Path(self.translate_path(self.path))
        if not self.ranges or match is None or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        start, end = match.groups()
        if start == "":
            first, last = max(0, size - int(end)), size - 1
        else:
            first, last = int(start), min(size - 1, int(end) if end else size - 1)
        handle = path.open("rb")
        handle.seek(first)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(last - first + 1))
        self.end_headers()
        return _Limited(handle, last - first + 1)


class _Limited:
    def __init__(self, handle, left: int) -> None:
        self.handle, self.left = handle, left

    def read(self, n: int = -1) -> bytes:
        n = self.left if n < 0 else min(n, self.left)
        data = self.handle.read(n)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()


def serve(root: Path, ranges: bool):
    """A threaded HTTP server of ``root`` on loopback (stop it with ``shutdown()``), and its base URL."""
    handler = type("H", (_Handler,), {"ranges": ranges})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), lambda *a, **k: handler(*a, directory=str(root), **k))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"

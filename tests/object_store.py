"""An S3-compatible server on loopback for tests and benchmarks (moto's server mode), and a proxy in front of it
that counts what it serves and fails chosen requests (HTTP 503, or a connection reset) deterministically."""

from __future__ import annotations

import http.client
import http.server
import os
import socket
import struct
import threading
from pathlib import Path

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


class S3Server:
    """moto's S3 on a free loopback port; ``upload`` copies a directory under a prefix of a bucket."""

    def __init__(self) -> None:
        import logging

        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        import boto3

        self.client = boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id="testing",
                                   aws_secret_access_key="testing", region_name="us-east-1")

    def upload(self, directory: Path, bucket: str, prefix: str) -> str:
        """Every file under ``directory`` (dot-files too) as ``s3://bucket/prefix/...``; that URL."""
        try:
            self.client.create_bucket(Bucket=bucket)
        except self.client.exceptions.BucketAlreadyOwnedByYou:
            pass
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                self.client.put_object(Bucket=bucket, Key=f"{prefix}/{path.relative_to(directory).as_posix()}",
                                       Body=path.read_bytes())
        return f"s3://{bucket}/{prefix}"

    def stop(self) -> None:
        self.server.stop()


class Proxy:
    """Forwards every request to ``upstream``; ``fail(n, path)`` says whether the n-th (from 1) fails, and how:
    None, ``"503"`` (S3's SlowDown), ``"down"`` (503 ServiceUnavailable) or ``"reset"``. ``log`` holds (method,
    path, status, body bytes) of each request answered."""

    def __init__(self, upstream: str, fail=lambda n, path: None) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.fail = fail
        self.log: list[tuple[str, str, int, int]] = []
        self.failed: list[tuple[str, str]] = []
        self._count = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy._count += 1
                    n = proxy._count
                how = proxy.fail(n, self.path)
                if how is not None:
                    proxy.failed.append((how, self.path))
                if how == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if how in ("503", "down"):
                    code, text = (b"SlowDown", b"Please reduce your request rate.") if how == "503" else \
                        (b"ServiceUnavailable", b"The service is down.")
                    data = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>" + code + b"</Code><Message>" + text +
                            b"</Message></Error>")
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                data = response.read()
                upstream.close()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(key, value)
                length = response.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                proxy.log.append((self.command, self.path, response.status, len(data)))

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def object_bytes(self) -> int:
        """Bytes of object data served (GETs of a key: not listings, whose path has a query)."""
        return sum(size for method, path, status, size in self.log if method == "GET" and "?" not in path
                   and status in (200, 206))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def storage_options(endpoint: str, **more) -> tuple[tuple[str, object], ...]:
    """What ``--storage-option`` would pass for ``endpoint``: credentials in the options, not the environment."""
    return (("endpoint_url", endpoint), ("key", "testing"), ("secret", "testing"),
            ("client_kwargs", {"region_name": "us-east-1"}), *more.items())


def environment(endpoint: str) -> dict[str, str]:
    """The environment of a child ``python -m compat.gate`` that reaches ``endpoint`` through fsspec's own
    configuration (no flag)."""
    return {**os.environ, **CREDENTIALS, "FSSPEC_S3_ENDPOINT_URL": endpoint}

"""One API server endpoint: plain requests and watch streams, answering status and decoded body.

Errors are answers, not exceptions: a 404 or a 422 is what a case compares.
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

TIMEOUT = 15.0
# client-go sends a request answered 429 with Retry-After up to ten times.
RETRIES_AFTER_429 = 10


@dataclass
class Answer:
    """A response: its status code and its decoded JSON body (text if it is not JSON)."""

    status: int
    body: Any
    events: list[dict[str, Any]] = field(default_factory=list)


class Endpoint:
    """An API server at ``url``; ``token`` and ``ca_file`` for a real one (HTTPS), neither for the
    sandbox (plain HTTP without credentials)."""

    def __init__(self, name: str, url: str, *, token: str | None = None, ca_file: str | None = None) -> None:
        self.name = name
        self.url = url
        parsed = urllib.parse.urlsplit(url)
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname or "127.0.0.1"
        self._port = parsed.port or (443 if self._https else 80)
        self._token = token
        self._context = ssl.create_default_context(cafile=ca_file) if self._https else None
        # One kept-alive connection per thread: cases run side by side on one endpoint.
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[http.client.HTTPConnection] = []

    @property
    def _conn(self) -> http.client.HTTPConnection | None:
        return getattr(self._local, "conn", None)

    @_conn.setter
    def _conn(self, conn: http.client.HTTPConnection | None) -> None:
        self._local.conn = conn
        if conn is not None:
            with self._lock:
                self._open.append(conn)

    def _connect(self, timeout: float = TIMEOUT) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _headers(self, body: Any, content_type: str | None, accept: str | None) -> dict[str, str]:
        # A fixed User-Agent: the real server names the field manager of a create or update after it.
        headers = {"Accept": accept or "application/json", "User-Agent": "conformance"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
        return headers

    @staticmethod
    def _encode(body: Any) -> bytes | None:
        if body is None:
            return None
        if isinstance(body, str):
            return body.encode()
        return json.dumps(body).encode()

    def _request(self, method: str, path: str, body: Any = None, *, content_type: str | None = None,
                 accept: str | None = None) -> tuple[Answer, float | None]:
        """One request on a kept-alive connection (reopened once if the server closed it), and the
        answer's ``Retry-After`` in seconds if it has one."""
        data = self._encode(body)
        headers = self._headers(body, content_type, accept)
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = self._connect()
            try:
                self._conn.request(method, path, body=data, headers=headers)
                resp = self._conn.getresponse()
                raw = resp.read()
            except (http.client.HTTPException, ConnectionError, BrokenPipeError):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
                continue
            if resp.getheader("Connection", "").lower() == "close":
                self._conn.close()
                self._conn = None
            return Answer(resp.status, _decode(raw)), _retry_after(resp.getheader("Retry-After"))
        raise AssertionError("unreachable")

    def request(self, method: str, path: str, body: Any = None, *, content_type: str | None = None,
                accept: str | None = None) -> Answer:
        """One request, sent again after a 429 that carries ``Retry-After``, as client-go does.

        A real server answers so while the watch cache of a just-created resource is still
        initialising ("storage is (re)initializing"): the wait is the server's, not the case's.
        """
        for _ in range(RETRIES_AFTER_429):
            answer, retry_after = self._request(method, path, body, content_type=content_type, accept=accept)
            if answer.status != 429 or retry_after is None:
                return answer
            time.sleep(min(retry_after, 2.0))
        return answer

    def watch(self, path: str, *, events: int, seconds: float, accept: str | None = None) -> Answer:
        """Open a watch and read its events until ``events`` non-BOOKMARK events arrived, the
        stream ended, or ``seconds`` passed."""
        conn = self._connect(timeout=seconds)
        deadline = time.monotonic() + seconds
        try:
            conn.request("GET", path, headers=self._headers(None, None, accept))
            resp = conn.getresponse()
            retry_after = _retry_after(resp.getheader("Retry-After"))
            while resp.status == 429 and retry_after is not None and time.monotonic() + retry_after < deadline:
                resp.read()
                conn.close()
                time.sleep(retry_after)
                conn = self._connect(timeout=seconds)
                conn.request("GET", path, headers=self._headers(None, None, accept))
                resp = conn.getresponse()
                retry_after = _retry_after(resp.getheader("Retry-After"))
            if resp.status != 200:
                return Answer(resp.status, _decode(resp.read()))
            got: list[dict[str, Any]] = []
            while sum(1 for e in got if e.get("type") != "BOOKMARK") < events:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                if conn.sock is not None:
                    conn.sock.settimeout(left)
                try:
                    line = resp.readline()
                except TimeoutError:
                    break
                if not line:
                    break
                if line.strip():
                    got.append(json.loads(line))
            return Answer(resp.status, None, got)
        finally:
            conn.close()

    def close(self) -> None:
        """Close the connections of every thread."""
        with self._lock:
            conns, self._open = self._open, []
        for conn in conns:
            conn.close()
        self._local = threading.local()


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")

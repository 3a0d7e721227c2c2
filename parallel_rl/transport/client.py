"""The HTTP client side: :class:`HttpClient` makes JSON calls with a timeout and a bounded retry with exponential
backoff; it raises typed errors and never waits forever."""

from __future__ import annotations

import json as _json
import logging
import time
from typing import Any, Optional

import urllib3

from ..errors import AuthError, PeerUnavailableError, ProtocolError, RemoteError
from .codec import LEASE_HEADER, encode_json

logger = logging.getLogger(__name__)

# the largest answer an HttpClient reads: far over any answer of ours (a learner's batch of references for
# a few thousand rows is a few hundred KiB), far under what would take a process's memory
MAX_ANSWER_BYTES = 64 * 1024 * 1024


class HttpClient:
    """JSON calls to one peer, with the cluster token, a timeout and bounded retries.

    Connection failures and timeouts are retried ``max_retries`` times with
    exponential backoff, then raise :class:`PeerUnavailableError`. An HTTP
    error answer raises :class:`RemoteError` (or :class:`AuthError` for
    401/403) at once; an answer that is not our JSON raises ProtocolError, and so does one of more than
    ``max_answer_bytes``, which is never read whole (a peer's answer cannot take this process's memory).
    """

    def __init__(
        self,
        base_url: str,
        token: Optional[str] = None,
        timeout: float = 5.0,
        max_retries: int = 3,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        max_answer_bytes: int = MAX_ANSWER_BYTES,
    ):
        self.base_url = base_url.rstrip("/")
        self.max_answer_bytes = int(max_answer_bytes)
        self.token = token
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff, self.max_backoff = backoff, max_backoff
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"
        self.lease: Optional[str] = None
        # urllib3 directly: a call costs about half the CPU of one through requests (a learner's data
        # thread makes ~70 a second on the learner's core). Thread-safe, keeps connections alive, and
        # reads no proxy settings from the environment.
        self._pool = urllib3.PoolManager(num_pools=2, maxsize=8, retries=False)

    def set_lease(self, lease: Optional[str]) -> None:
        """Send ``lease`` (the coordinator's lease token for this worker) with every later call."""
        self.lease = lease
        headers = {k: v for k, v in self._headers.items() if k != LEASE_HEADER}
        if lease:
            headers[LEASE_HEADER] = lease
        self._headers = headers

    def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        timeout: Optional[float] = None,
        retries: Optional[int] = None,
        params: Optional[dict] = None,
    ) -> Any:
        url = self.base_url + path
        body = None if json is None else encode_json(json)
        retries = self.max_retries if retries is None else retries
        delay = self.backoff
        last_exc: Optional[Exception] = None
        for attempt in range(retries + 1):
            try:
                response = self._pool.request(
                    method,
                    url,
                    body=body,
                    fields=params,
                    headers=self._headers,
                    timeout=timeout or self.timeout,
                    preload_content=False,
                )
                content = self._read(method, url, response)
            except urllib3.exceptions.HTTPError as exc:  # refused, reset, timed out
                last_exc = exc
                if attempt < retries:
                    time.sleep(delay)  # backoff between bounded retries, not a wait for state
                    delay = min(delay * 2, self.max_backoff)
                continue
            return self._decode(method, url, response.status, content)
        raise PeerUnavailableError(
            f"{method} {url} failed after {retries + 1} attempt(s): {type(last_exc).__name__}: {last_exc}"
        )

    def _read(self, method: str, url: str, response: urllib3.BaseHTTPResponse) -> bytes:
        """The answer's body, at most ``max_answer_bytes`` of it: past that the connection is closed unread
        and ProtocolError raised."""
        limit = self.max_answer_bytes
        try:
            declared = int(response.headers.get("Content-Length") or 0)
        except ValueError:
            declared = 0
        content = b"" if declared > limit else response.read(limit + 1)
        if declared > limit or len(content) > limit:
            response.close()  # the rest is never read: the connection goes
            response.release_conn()
            exc = ProtocolError(
                f"{method} {url} answered HTTP {response.status} with more than {limit} bytes"
                f"{f' ({declared} declared)' if declared > limit else ''}; a parallel_rl server answers far less "
                f"(is this a parallel_rl server? if the answers are meant to be this large, raise the client's "
                f"max_answer_bytes)"
            )
            exc.status = response.status
            raise exc
        response.release_conn()
        return content

    @staticmethod
    def _decode(method: str, url: str, status: int, content: bytes) -> Any:
        try:
            data = _json.loads(content) if content else {}
        except ValueError:
            snippet = content[:80].decode(errors="replace").replace("\n", " ")
            exc = ProtocolError(
                f"{method} {url} answered HTTP {status} with non-JSON {snippet!r}; is this a parallel_rl server?"
            )
            exc.status = status
            raise exc from None
        if status >= 400:
            err = data.get("error") if isinstance(data, dict) else None
            if not isinstance(err, dict):
                exc = ProtocolError(f"{method} {url} answered HTTP {status} without an error object")
                exc.status = status
                raise exc
            code, message = str(err.get("code", "error")), str(err.get("message", ""))
            if status in (401, 403):
                raise AuthError(f"{method} {url}: {message} (HTTP {status})")
            raise RemoteError(status, code, message)
        return data

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def post(self, path: str, json: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, json=json if json is not None else {}, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)

    def close(self) -> None:
        self._pool.clear()

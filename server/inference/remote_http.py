"""HTTP to a model server: a connection per generation in flight, bounded retries, a circuit.

A remote server fails in ways a model in the process does not: it is down, restarting (5xx),
busy (429 with `Retry-After`), or stops sending in the middle of a reply. Every failure here
becomes a `BackendError` subclass within the generation's deadline, so the interaction falls
back at once and nothing is applied:

* connection refused, a reset, 502/503/504, a reply broken off: retried with backoff
  (`RetryPolicy`) while the deadline allows; each such failure counts towards the circuit;
* 429: retried after `Retry-After` (or the backoff) when that fits the deadline, else
  `BackendBusy`; it does not count towards the circuit (the server answered);
* no byte for `stall_s` in a streamed reply: `BackendTimeout` (a whole reply, which sends
  nothing until it is written, is limited only by the deadline);
* the deadline: `BackendTimeout`, the connection closed; it does not count towards the circuit;
* any other 4xx or a 500: `BackendError` with the server's own message (the server is up; the
  request is what it refuses: a model it does not have, a prompt longer than its context).

After `CircuitBreaker.threshold` failures in a row the circuit opens: calls fail at once with
`BackendUnavailable` ("the model server is unreachable") instead of each waiting out its own
retries, so queued interactions fall back fast; after `cooldown_s` one call tries again.

httpx rather than `http.client`: a thread-safe connection pool sized to the server's slots,
streamed responses that can be closed mid-body (which is how a cut stops the remote
generation), and separate connect, read and pool timeouts. It is already installed with
`huggingface_hub`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from loreguard.server.inference.base import BackendBusy, BackendError, BackendTimeout, BackendUnavailable


@dataclass(frozen=True)
class RetryPolicy:
    #: Tries of one request, the first included.
    attempts: int = 3
    #: The wait after the first failure; it doubles after each, up to `max_backoff_s`.
    backoff_s: float = 0.25
    max_backoff_s: float = 2.0

    def backoff(self, failures: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * 2 ** (failures - 1))


class CircuitBreaker:
    """Closed: calls go through. Open (after `threshold` failures in a row): calls fail at once.
    After `cooldown_s` one call goes through (half-open); its success closes the circuit."""

    def __init__(self, threshold: int = 3, cooldown_s: float = 5.0) -> None:
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self._failures = 0
        self._opened_at: float | None = None
        self._trial = False
        self._lock = threading.Lock()
        #: Times the circuit opened.
        self.opened = 0

    @property
    def is_open(self) -> bool:
        return self._opened_at is not None

    def before_call(self, where: str) -> None:
        with self._lock:
            if self._opened_at is None:
                return
            waited = time.monotonic() - self._opened_at
            if waited >= self.cooldown_s and not self._trial:
                self._trial = True  # this call tries the server; the others still fail fast
                return
        raise BackendUnavailable(
            f"the model server is unreachable: {where} failed {self.threshold} times in a row; "
            f"trying again in {max(0.0, self.cooldown_s - waited):.1f} s"
        )

    def settle(self) -> None:
        """After a call: a half-open trial that recorded neither success nor failure (it gave up
        first) lets the next call try instead."""
        with self._lock:
            self._trial = False if self._opened_at is not None else self._trial

    def succeeded(self) -> None:
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial = False

    def failed(self) -> None:
        with self._lock:
            self._failures += 1
            if self._trial or (self._opened_at is None and self._failures >= self.threshold):
                if self._opened_at is None:
                    self.opened += 1
                self._opened_at = time.monotonic()
            self._trial = False


class RemoteHTTP:
    """JSON over HTTP to one server, `connections` requests at once."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        connections: int = 1,
        stall_s: float = 15.0,
        connect_s: float = 5.0,
        retry: RetryPolicy | None = None,
        breaker: CircuitBreaker | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.stall_s = stall_s
        self.connect_s = connect_s
        self.retry = retry or RetryPolicy()
        self.breaker = breaker or CircuitBreaker()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client = httpx.Client(base_url=self.base_url, headers=headers, limits=limits, trust_env=False)

    def resize(self, connections: int) -> None:
        """A pool of `connections` (the server's slots, known once it was asked)."""
        old = self._client
        limits = httpx.Limits(max_connections=connections, max_keepalive_connections=connections)
        self._client = httpx.Client(base_url=self.base_url, headers=old.headers, limits=limits, trust_env=False)
        old.close()

    def get_json(self, path: str, *, timeout_s: float = 10.0) -> Any:
        """GET `path` once (no retry: start-up checks report what they find); its JSON body."""
        try:
            response = self._client.get(path, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, self.connect_s)))
        except httpx.TimeoutException as exc:
            raise BackendTimeout(f"{self.base_url}{path} did not answer within {timeout_s:g} s") from exc
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"the model server is unreachable: {self.base_url} ({_cause(exc)})") from exc
        if response.status_code != 200:
            raise BackendError(f"{self.base_url}{path} answered {response.status_code}: {_server_message(response.content)}")
        return _json(response.content, f"{self.base_url}{path}")

    def post_json(self, path: str, body: dict[str, Any], *, deadline: float) -> dict[str, Any]:
        """One JSON reply. The server sends nothing until the whole reply is written, so the
        only limit on the wait is the deadline (a stall cannot be told from a long reply)."""
        where = f"{self.base_url}{path}"
        with self._open(path, body, deadline, streamed=False) as response:
            data = self._read(response, where, deadline, streamed=False)
        reply = _json(data, where)
        if not isinstance(reply, dict):
            raise BackendError(f"{where} answered JSON that is not an object: {data[:200]!r}")
        return reply

    @contextmanager
    def events(self, path: str, body: dict[str, Any], *, deadline: float) -> Iterator[Iterator[dict[str, Any]]]:
        """POST `path` with `"stream": true`; the server-sent events' JSON payloads. Leaving the
        block closes the connection: the server stops generating for a client that is gone. At
        the deadline the connection is closed too, whatever the server is doing."""
        with self._open(path, body, deadline, streamed=True) as response:
            watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), response.close)
            watchdog.daemon = True
            watchdog.start()
            try:
                yield self._payloads(response, path, deadline)
            finally:
                watchdog.cancel()

    def _payloads(self, response: httpx.Response, path: str, deadline: float) -> Iterator[dict[str, Any]]:
        where = f"{self.base_url}{path}"
        try:
            for line in response.iter_lines():
                if time.monotonic() > deadline:
                    raise BackendTimeout(f"{where} ran past the generation's deadline")
                if line.startswith("error:"):  # llama-server reports a failure mid-stream this way
                    raise BackendError(f"{where} failed mid-stream: {_server_message(line[6:].strip().encode())}")
                if not line.startswith("data:"):
                    continue  # blank separators, `: ping` comments, `event:` names
                data = line[len("data:") :].strip()
                if data == "[DONE]":
                    return
                payload = _json(data.encode(), where)
                if isinstance(payload, dict) and payload.get("error"):
                    raise BackendError(f"{where} failed mid-stream: {_server_message(data.encode())}")
                if isinstance(payload, dict):
                    yield payload
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise self._broken_off(exc, where, deadline, streamed=True) from exc

    def _read(self, response: httpx.Response, where: str, deadline: float, *, streamed: bool) -> bytes:
        try:
            return response.read()
        except (httpx.HTTPError, httpx.StreamError) as exc:
            raise self._broken_off(exc, where, deadline, streamed=streamed) from exc

    def _broken_off(self, exc: Exception, where: str, deadline: float, *, streamed: bool) -> BackendError:
        """The error for a reply that stopped coming. Only the server's fault counts towards the
        circuit: running out of the caller's own deadline does not."""
        if time.monotonic() >= deadline - 0.05:
            return BackendTimeout(f"{where} ran past the generation's deadline")
        self.breaker.failed()
        if isinstance(exc, httpx.TimeoutException) and streamed:
            return BackendTimeout(f"{where} sent nothing for {self.stall_s:g} s in the middle of a reply")
        return BackendUnavailable(f"the model server is unreachable: {where} broke off a reply ({_cause(exc)})")

    @contextmanager
    def _open(self, path: str, body: dict[str, Any], deadline: float, *, streamed: bool) -> Iterator[httpx.Response]:
        """The response to POST `path` once its status is 200, after retries; closed on exit."""
        where = f"{self.base_url}{path}"
        payload = json.dumps(body).encode()
        failures = 0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BackendTimeout(f"{where}: the generation's deadline passed before the server answered")
            self.breaker.before_call(self.base_url)
            try:
                response, error, wait = self._try(path, payload, left, streamed=streamed, failures=failures)
            finally:
                self.breaker.settle()  # a half-open trial that recorded nothing is given back
            if response is not None:
                try:
                    yield response
                finally:
                    response.close()
                return
            failures += 1
            if failures >= self.retry.attempts or time.monotonic() + wait >= deadline:
                raise error
            time.sleep(wait)

    def _try(
        self, path: str, payload: bytes, left: float, *, streamed: bool, failures: int
    ) -> tuple[httpx.Response | None, BackendError, float]:
        """One try: (the 200 response, -, -), or (None, the error, the wait before the next)."""
        where = f"{self.base_url}{path}"
        # Streamed, a silent gap of stall_s is a stall; whole, the reply takes as long as it takes.
        read_s = min(self.stall_s, left) if streamed else left
        timeout = httpx.Timeout(read_s, connect=min(self.connect_s, left), pool=left)
        request = self._client.build_request(
            "POST", path, content=payload, headers={"Content-Type": "application/json"}, timeout=timeout
        )
        backoff = self.retry.backoff(failures + 1)
        try:
            response = self._client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            # Only a limit of the server's own making counts towards the circuit: connecting, or
            # a streamed reply's silence; not the caller's deadline, nor our own pool.
            if isinstance(exc, httpx.ConnectTimeout):
                servers = self.connect_s < left
            else:
                servers = streamed and isinstance(exc, httpx.ReadTimeout) and self.stall_s < left
            if servers:
                self.breaker.failed()
            error: BackendError = BackendTimeout(f"{where} did not answer within {min(read_s, left):.1f} s")
            error.__cause__ = exc
            return None, error, backoff
        except httpx.HTTPError as exc:
            self.breaker.failed()
            error = BackendUnavailable(f"the model server is unreachable: {self.base_url} ({_cause(exc)})")
            error.__cause__ = exc
            return None, error, backoff
        if response.status_code == 200:
            self.breaker.succeeded()
            return response, BackendError(""), 0.0
        try:
            data = self._read(response, where, time.monotonic() + left, streamed=False)
        finally:
            response.close()
        message = f"{where} answered {response.status_code}: {_server_message(data)}"
        if response.status_code == 429:
            self.breaker.succeeded()  # busy, not down
            return None, BackendBusy(message), _retry_after(response.headers.get("Retry-After")) or backoff
        if response.status_code in (502, 503, 504):  # a proxy with no server behind it, or one restarting
            self.breaker.failed()
            return None, BackendUnavailable(f"the model server is unreachable: {message}"), backoff
        # The server is up and refuses the request (a 4xx, or a 500 for what it was asked):
        # another try would be refused too.
        self.breaker.succeeded()
        raise BackendError(message)

    def close(self) -> None:
        self._client.close()


def _json(data: bytes, where: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        raise BackendError(f"{where} answered with something that is not JSON: {data[:120]!r}") from None


def _server_message(data: bytes) -> str:
    """The error message in an OpenAI-style error body (`{"error": {"message": ...}}`), else
    the body's start."""
    try:
        body = json.loads(data)
    except ValueError:
        return repr(data[:300])
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:300]
    if isinstance(error, str):
        return error[:300]
    if isinstance(body, dict) and body.get("detail"):
        return str(body["detail"])[:300]
    return repr(data[:300])


def _retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header: a number, or an HTTP date."""
    if not value:
        return None
    if value.strip().replace(".", "", 1).isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _cause(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text.split("] ", 1)[-1] if text.startswith("[Errno") else text

"""tokend_client: the Python client of tokend's REST API (Python 3.9+, standard library only).

It is bound to intents: ``issue`` needs the caller's intent ID and never makes
one up, and every retry of one call sends the same ``Idempotency-Key`` and the
same body bytes. Within a time budget (15 s by default, enough to ride out a
restart or a rolling deploy) it retries what is safe and transient: a network
error before an answer, 409 ``in_progress``, 429, 502, 503 and 504, waiting at
least the answer's ``Retry-After``. It never retries other answers, and not 409
``outcome_unknown`` in particular: that is for an operator to reconcile.

Errors:

- ``Problem``: tokend answered with an error (``.code`` is the stable code).
  ``OutcomeUnknown`` is the ``outcome_unknown`` problem.
- ``NoAnswer``: no answer arrived, even after the retries. The call may or may
  not have taken effect; the same call again (same intent, same token) finds
  out which, and never runs the effect twice.
"""

import base64
import email.utils
import hashlib
import hmac
import json
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

__all__ = [
    "Client",
    "Retry",
    "Answer",
    "Lease",
    "Problem",
    "OutcomeUnknown",
    "NoAnswer",
    "WebhookVerificationError",
    "verify_webhook",
]

MAX_RESPONSE_BYTES = 32 << 20


class Problem(Exception):
    """An error answer of tokend: an RFC 9457 problem with a stable ``code``."""

    def __init__(self, status: int, body: Mapping[str, Any], request_id: str = "", retry_after: float = 0):
        self.status = status
        self.code = str(body.get("code", "")) or "http_%d" % status
        self.title = str(body.get("title", ""))
        self.detail = str(body.get("detail", ""))
        self.field = body.get("field")
        self.reason = body.get("reason")
        self.body = dict(body)
        self.request_id = request_id
        self.retry_after = retry_after
        msg = "tokend: %d %s: %s" % (status, self.code, self.detail or self.title)
        if request_id:
            msg += " [request %s]" % request_id
        super().__init__(msg)


class OutcomeUnknown(Problem):
    """409 outcome_unknown: the token's execution has an unknown outcome.

    Never retried: wait until an operator reconciles the token, then read it."""


class NoAnswer(Exception):
    """No answer arrived: the call may or may not have taken effect.

    Send the same call again (the same intent ID, the same token) to find out;
    tokend makes that retry safe."""

    def __init__(self, method: str, path: str, cause: BaseException):
        self.cause = cause
        super().__init__("tokend: %s %s: no answer (%s); the outcome is unknown, "
                         "send the same call again to learn it" % (method, path, cause))


class WebhookVerificationError(Exception):
    """A webhook delivery that does not verify: answer it with a 4xx, apply nothing."""


@dataclass
class Retry:
    """How one call is retried: attempts, exponential backoff bounds, and a time budget (seconds)."""

    attempts: int = 30
    base: float = 0.1
    max: float = 2.0
    budget: float = 15.0


@dataclass
class Answer:
    """A successful answer: its status, its JSON body, and whether tokend replayed it."""

    status: int
    body: Any
    replayed: bool = False
    request_id: str = ""
    raw: bytes = b""
    #: set on a lease-mode spend's 202 answer
    lease: Optional["Lease"] = None


@dataclass
class Lease:
    """The execution right a lease-mode spend grants; report the outcome before it expires."""

    client: "Client"
    token_id: str
    generation: int
    operation_id: str
    lease_expires_at: str

    def complete(self, status: int = 200, result: Any = None) -> Answer:
        return self.client.complete(self.token_id, self.generation, status, result)

    def fail(self, status: int = 422, error: Any = None) -> Answer:
        return self.client.fail(self.token_id, self.generation, status, error)

    def unknown(self) -> Answer:
        return self.client.unknown(self.token_id, self.generation)


def _retry_after(value: Optional[str]) -> float:
    if not value:
        return 0.0
    try:
        return max(0.0, float(int(value)))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time())
    except (TypeError, ValueError):
        return 0.0


_RETRY_STATUSES = {429, 502, 503, 504}


class Client:
    """Calls one tokend with one API key. Safe to share between threads."""

    def __init__(self, base_url: str, api_key: str, retry: Optional[Retry] = None,
                 timeout: float = 120.0, user_agent: str = "tokend-python-client"):
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.netloc:
            raise ValueError("tokend_client: base URL %r: want http(s)://host[:port]" % base_url)
        if not api_key:
            raise ValueError("tokend_client: an API key is required")
        self.base = base_url.rstrip("/")
        self._key = api_key
        self.retry = retry or Retry()
        self.timeout = timeout
        self.user_agent = user_agent
        # No proxy from the environment: the API key must reach tokend only.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __repr__(self) -> str:  # never show the key
        return "Client(%r)" % self.base

    # -- transport -----------------------------------------------------------

    def _call(self, method: str, path: str, body: Any = None, query: Optional[Mapping[str, Any]] = None,
              headers: Optional[Mapping[str, str]] = None,
              accept: Callable[[int, str], bool] = lambda status, ctype: 200 <= status < 300) -> Answer:
        data = None if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
        url = self.base + path
        if query:
            q = {k: v for k, v in query.items() if v not in (None, "")}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        start = time.monotonic()
        last: Optional[BaseException] = None
        for attempt in range(max(self.retry.attempts, 1)):
            wait_at_least = 0.0
            try:
                return self._attempt(method, url, data, headers, accept)
            except Problem as p:
                if not self._retryable(p):
                    raise
                last, wait_at_least = p, p.retry_after
            except NoAnswer as e:
                last = e
            if attempt + 1 >= self.retry.attempts:
                break
            bound = min(self.retry.base * (2 ** min(attempt, 30)), self.retry.max)
            delay = max(bound / 2 + random.uniform(0, bound / 2), wait_at_least)
            if self.retry.budget and time.monotonic() - start + delay > self.retry.budget:
                break
            time.sleep(delay)
        assert last is not None
        raise last

    @staticmethod
    def _retryable(p: Problem) -> bool:
        return p.status in _RETRY_STATUSES or (p.status == 409 and p.code == "in_progress")

    def _attempt(self, method: str, url: str, data: Optional[bytes], headers: Optional[Mapping[str, str]],
                 accept: Callable[[int, str], bool]) -> Answer:
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self._key)
        req.add_header("Accept", "application/json, application/problem+json")
        req.add_header("User-Agent", self.user_agent)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        path = urllib.parse.urlsplit(url).path
        try:
            try:
                resp = self._opener.open(req, timeout=self.timeout)
            except urllib.error.HTTPError as e:
                resp = e
            with resp:
                raw = resp.read(MAX_RESPONSE_BYTES + 1)
                status, hdrs = resp.status if hasattr(resp, "status") else resp.code, resp.headers
        except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError, OSError) as e:
            raise NoAnswer(method, path, e) from e
        if len(raw) > MAX_RESPONSE_BYTES:
            raise NoAnswer(method, path, ValueError("answer over %d bytes" % MAX_RESPONSE_BYTES))
        ctype = (hdrs.get("Content-Type") or "").split(";")[0].strip()
        request_id = hdrs.get("X-Request-Id") or ""
        if accept(status, ctype):
            body = json.loads(raw) if raw and ctype == "application/json" else None
            return Answer(status, body, hdrs.get("Idempotent-Replayed") == "true", request_id, raw)
        try:
            problem = json.loads(raw) if raw else {}
            if not isinstance(problem, dict):
                problem = {}
        except ValueError:
            problem = {"detail": raw[:200].decode("utf-8", "replace")}
        cls = OutcomeUnknown if problem.get("code") == "outcome_unknown" else Problem
        raise cls(status, problem, request_id, _retry_after(hdrs.get("Retry-After")))

    # -- tokens ----------------------------------------------------------------

    def issue(self, intent_id: str, operation: str, subject: str, ttl_seconds: int,
              payload: Any = None) -> Answer:
        """Asks for a token for the intent ``intent_id``. The same request again answers the
        same token (``replayed``); another request under the same intent is 422 idempotency_key_reused."""
        if not intent_id:
            raise ValueError("tokend_client: issue needs the caller's intent ID")
        body: Dict[str, Any] = {"operation": operation, "subject": subject, "ttl_seconds": ttl_seconds}
        if payload is not None:
            body["payload"] = payload
        return self._call("POST", "/v1/tokens", body, headers={"Idempotency-Key": intent_id})

    def spend(self, token: str, operation: str, subject: str, payload: Any = None) -> Answer:
        """Spends a token. The answer is the stored outcome, the same on every replay (a
        handler's final failure is an answer too, with its 4xx/5xx status); in lease mode
        (202) ``answer.lease`` is set: run the effect downstream, then report on it."""
        body: Dict[str, Any] = {"token": token, "operation": operation, "subject": subject}
        if payload is not None:
            body["payload"] = payload
        a = self._call("POST", "/v1/tokens/consume", body,
                       accept=lambda status, ctype: 200 <= status < 300 or ctype == "application/json")
        if a.status == 202 and isinstance(a.body, dict):
            a.lease = Lease(self, a.body["token_id"], int(a.body["generation"]),
                            a.body["operation_id"], a.body.get("lease_expires_at", ""))
        return a

    def complete(self, token_id: str, generation: int, status: int = 200, result: Any = None) -> Answer:
        return self._report(token_id, "complete", {"generation": generation, "status": status, "result": result})

    def fail(self, token_id: str, generation: int, status: int = 422, error: Any = None) -> Answer:
        return self._report(token_id, "fail", {"generation": generation, "status": status, "error": error})

    def unknown(self, token_id: str, generation: int) -> Answer:
        return self._report(token_id, "unknown", {"generation": generation})

    def _report(self, token_id: str, action: str, body: Dict[str, Any]) -> Answer:
        return self._call("POST", "/v1/tokens/%s/%s" % (_esc(token_id), action), body)

    def token(self, token_id: str) -> Answer:
        """Reads a token's state and expiry (never its secret)."""
        return self._call("GET", "/v1/tokens/" + _esc(token_id))

    def account(self, account: str) -> Answer:
        return self._call("GET", "/v1/ledger/accounts/" + _esc(account))

    # -- operators -------------------------------------------------------------

    def inspect(self, token_id: str) -> Answer:
        return self._call("GET", "/v1/admin/tokens/" + _esc(token_id))

    def list_tokens(self, state: str = "", operation: str = "", subject: str = "", limit: int = 0,
                    cursor: str = "") -> Answer:
        return self._call("GET", "/v1/admin/tokens", query={
            "state": state, "operation": operation, "subject": subject,
            "limit": limit or None, "cursor": cursor})

    def tokens(self, state: str = "", operation: str = "", subject: str = "") -> Iterator[Dict[str, Any]]:
        """Every token that matches, page after page."""
        cursor = ""
        while True:
            page = self.list_tokens(state, operation, subject, cursor=cursor).body
            yield from page.get("items") or []
            cursor = page.get("next_cursor") or ""
            if not cursor:
                return

    def revoke(self, token_id: str, reason: str = "") -> Answer:
        return self._call("POST", "/v1/admin/tokens/%s/revoke" % _esc(token_id), {"reason": reason})

    def reconcile(self, token_id: str, outcome: str, status: Optional[int] = None, result: Any = None) -> Answer:
        body: Dict[str, Any] = {"outcome": outcome}
        if status is not None:
            body["status"] = status
        if result is not None:
            body["result"] = result
        return self._call("POST", "/v1/admin/tokens/%s/reconcile" % _esc(token_id), body)

    def purge(self) -> Answer:
        return self._call("POST", "/v1/admin/purge", {})

    def put_operation(self, name: str, policy: Mapping[str, Any]) -> Answer:
        return self._call("PUT", "/v1/admin/operations/" + _esc(name), dict(policy))

    def operations(self) -> Answer:
        return self._call("GET", "/v1/admin/operations")

    def create_webhook(self, url: str, idempotency_key: str = "", **fields: Any) -> Answer:
        """Registers a webhook endpoint. Pass an ``idempotency_key`` so that a retry
        cannot register the endpoint twice."""
        return self._call("POST", "/v1/admin/webhooks", dict(fields, url=url),
                          headers={"Idempotency-Key": idempotency_key} if idempotency_key else None)

    def webhooks(self) -> Answer:
        return self._call("GET", "/v1/admin/webhooks")

    def disable_webhook(self, webhook_id: str) -> Answer:
        return self._call("POST", "/v1/admin/webhooks/%s/disable" % _esc(webhook_id))

    def enable_webhook(self, webhook_id: str) -> Answer:
        return self._call("POST", "/v1/admin/webhooks/%s/enable" % _esc(webhook_id))

    def redeliver_webhook(self, webhook_id: str, **selection: Any) -> Answer:
        return self._call("POST", "/v1/admin/webhooks/%s/redeliver" % _esc(webhook_id), dict(selection))

    # -- the feed --------------------------------------------------------------

    def events(self, after: str = "", epoch: str = "", limit: int = 0, wait: int = 0) -> Answer:
        """One page of the tenant's events: ``items``, ``next_cursor``, ``epoch``."""
        return self._call("GET", "/v1/events", query={
            "after": after, "epoch": epoch, "limit": limit or None, "wait": wait or None})

    def follow(self, after: str = "", epoch: str = "", wait: int = 20,
               on_epoch: Optional[Callable[[str], None]] = None) -> Iterator[Dict[str, Any]]:
        """Every event after ``after``, waiting for new ones. Keep each event's position and
        the epoch (``on_epoch``) to resume. A cursor a restored feed cannot honour raises the
        409 cursor_epoch Problem, whose detail says where to resume; it never skips."""
        while True:
            try:
                page = self.events(after, epoch, wait=wait).body
            except Problem as p:
                if p.code == "too_many_waiters":
                    time.sleep(max(p.retry_after, 1))
                    continue
                raise
            if page.get("epoch"):
                epoch = page["epoch"]
            if on_epoch:
                on_epoch(epoch)
            yield from page.get("items") or []
            after = page.get("next_cursor") or after


def _esc(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def verify_webhook(secrets: Any, headers: Mapping[str, str], body: bytes, tolerance: float = 300,
                   now: Optional[float] = None) -> None:
    """Checks a delivery's Standard Webhooks signature under any of ``secrets`` (a ``whsec_``
    string or a list of them, as during a rotation's overlap) and its timestamp within
    ``tolerance`` seconds. Raises WebhookVerificationError; returns None when it verifies."""
    lower = {k.lower(): v for k, v in headers.items()}
    msg_id, ts, sigs = lower.get("webhook-id"), lower.get("webhook-timestamp"), lower.get("webhook-signature")
    if not msg_id or not ts or not sigs:
        raise WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature")
    try:
        stamp = int(ts)
    except ValueError:
        raise WebhookVerificationError("invalid webhook-timestamp") from None
    now = time.time() if now is None else now
    if stamp < now - tolerance:
        raise WebhookVerificationError("message too old")
    if stamp > now + tolerance:
        raise WebhookVerificationError("message timestamp too new")
    if isinstance(secrets, str):
        secrets = [secrets]
    signed = b"%s.%d." % (msg_id.encode(), stamp) + body
    given = [s.split(",", 1)[1] for s in sigs.split() if s.startswith("v1,")]
    for secret in secrets:
        key = base64.b64decode(secret[len("whsec_"):] if secret.startswith("whsec_") else secret)
        want = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
        if any(hmac.compare_digest(want, g) for g in given):
            return
    raise WebhookVerificationError("no matching signature")

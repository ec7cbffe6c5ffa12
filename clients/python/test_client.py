"""Tests of tokend_client: against a real tokend (scripts/test-clients starts one and
sets TOKEND_CLIENT_TEST_*), and against small local servers for the retry rules."""

import base64
import hashlib
import hmac
import http.server
import json
import os
import subprocess
import threading
import time
import unittest
import uuid

from tokend_client import (Client, NoAnswer, OutcomeUnknown, Problem, Retry, WebhookVerificationError,
                           verify_webhook)

URL = os.environ.get("TOKEND_CLIENT_TEST_URL", "")
KEY = os.environ.get("TOKEND_CLIENT_TEST_KEY", "")
OPERATOR_KEY = os.environ.get("TOKEND_CLIENT_TEST_OPERATOR_KEY", "")
RESTART = os.environ.get("TOKEND_CLIENT_TEST_RESTART", "")


def uid(prefix: str) -> str:
    return "%s-%s" % (prefix, uuid.uuid4().hex[:12])


class Scripted(http.server.BaseHTTPRequestHandler):
    """Answers each request with the next scripted (status, headers, body); records what came."""

    script = []  # type: list
    seen = []  # type: list

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        type(self).seen.append((time.monotonic(), dict(self.headers), body))
        if not type(self).script:
            self.close_connection = True
            self.connection.close()  # hang up: no answer
            return
        status, headers, out = type(self).script.pop(0)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class RetryRules(unittest.TestCase):
    def serve(self, script):
        handler = type("H", (Scripted,), {"script": list(script), "seen": []})
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        return "http://127.0.0.1:%d" % srv.server_address[1], handler

    def test_retries_with_the_same_bytes_after_retry_after(self):
        problem = json.dumps({"code": "in_progress", "status": 409}).encode()
        ok = json.dumps({"id": "tok_1", "token": "s", "state": "issued"}).encode()
        url, h = self.serve([(409, {"Content-Type": "application/problem+json", "Retry-After": "1"}, problem),
                             (201, {"Content-Type": "application/json"}, ok)])
        a = Client(url, "k").issue("intent-1", "op", "alice", 60, {"amount": 5, "note": "<é>"})
        self.assertEqual(a.status, 201)
        self.assertEqual(len(h.seen), 2)
        (t1, hd1, b1), (t2, hd2, b2) = h.seen
        self.assertEqual(b1, b2)
        self.assertEqual(hd1["Idempotency-Key"], "intent-1")
        self.assertEqual(hd2["Idempotency-Key"], "intent-1")
        self.assertGreaterEqual(t2 - t1, 0.9, "Retry-After: 1 was not waited out")

    def test_outcome_unknown_is_not_retried(self):
        body = json.dumps({"code": "outcome_unknown", "status": 409, "detail": "reconcile"}).encode()
        url, h = self.serve([(409, {"Content-Type": "application/problem+json"}, body)] * 3)
        with self.assertRaises(OutcomeUnknown) as cm:
            Client(url, "k").spend("s", "op", "alice")
        self.assertEqual(cm.exception.code, "outcome_unknown")
        self.assertEqual(len(h.seen), 1)

    def test_no_answer_is_its_own_error(self):
        url, h = self.serve([])
        c = Client(url, "k", retry=Retry(attempts=2, base=0.01, max=0.01))
        with self.assertRaises(NoAnswer):
            c.spend("s", "op", "alice")
        self.assertEqual(len(h.seen), 2)
        self.assertEqual(h.seen[0][2], h.seen[1][2])

    def test_final_problem_is_not_retried(self):
        body = json.dumps({"code": "payload_mismatch", "status": 422}).encode()
        url, h = self.serve([(422, {"Content-Type": "application/problem+json"}, body)])
        with self.assertRaises(Problem) as cm:
            Client(url, "k").spend("s", "op", "alice", {"a": 1})
        self.assertEqual(cm.exception.code, "payload_mismatch")
        self.assertEqual(len(h.seen), 1)

    def test_issue_needs_an_intent(self):
        with self.assertRaises(ValueError):
            Client("http://127.0.0.1:1", "k").issue("", "op", "alice", 60)


class WebhookSignatures(unittest.TestCase):
    secret = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()

    def sign(self, msg_id, ts, body, secret=None):
        key = base64.b64decode((secret or self.secret)[6:])
        mac = hmac.new(key, b"%s.%d.%s" % (msg_id.encode(), ts, body), hashlib.sha256).digest()
        return "v1," + base64.b64encode(mac).decode()

    def test_verifies_and_refuses(self):
        now = int(time.time())
        body = b'{"type":"spend"}'
        h = {"webhook-id": "evt_1", "webhook-timestamp": str(now), "webhook-signature": self.sign("evt_1", now, body)}
        verify_webhook(self.secret, h, body)
        verify_webhook(["whsec_" + base64.b64encode(b"x" * 32).decode(), self.secret], h, body)
        for bad_body, bad_h in [(body + b" ", h), (body, dict(h, **{"webhook-id": "evt_2"})),
                                (body, dict(h, **{"webhook-timestamp": str(now - 3600)})),
                                (body, {"webhook-id": "evt_1"})]:
            with self.assertRaises(WebhookVerificationError):
                verify_webhook(self.secret, bad_h, bad_body)


@unittest.skipUnless(URL and KEY and OPERATOR_KEY, "set by scripts/test-clients: a real tokend")
class AgainstTokend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = Client(URL, KEY)
        cls.op = Client(URL, OPERATOR_KEY)

    def balance(self, account):
        return self.c.account(account).body["balance"]

    def test_issue_replay_spend_double_spend(self):
        account, intent = uid("acct"), uid("intent")
        payload = {"account": account, "amount": 7}
        t = self.c.issue(intent, "ledger.credit", "alice", 300, payload)
        self.assertEqual(t.status, 201)
        self.assertFalse(t.replayed)
        again = self.c.issue(intent, "ledger.credit", "alice", 300, payload)
        self.assertTrue(again.replayed)
        self.assertEqual((again.body["id"], again.body["token"]), (t.body["id"], t.body["token"]))
        with self.assertRaises(Problem) as cm:
            self.c.issue(intent, "ledger.credit", "alice", 300, {"account": account, "amount": 8})
        self.assertEqual((cm.exception.status, cm.exception.code), (422, "idempotency_key_reused"))

        first = self.c.spend(t.body["token"], "ledger.credit", "alice", payload)
        self.assertEqual(first.status, 200)
        second = self.c.spend(t.body["token"], "ledger.credit", "alice", payload)
        self.assertTrue(second.replayed)
        self.assertEqual(second.raw, first.raw)
        self.assertEqual(self.balance(account), 7)
        self.assertEqual(self.c.token(t.body["id"]).body["state"], "consumed")
        with self.assertRaises(Problem) as cm:
            self.c.spend(t.body["token"], "ledger.credit", "bob", payload)
        self.assertEqual(cm.exception.code, "binding_mismatch")

    def test_lease_complete_and_unknown_reconcile(self):
        name = "py.lease." + "".join(chr(ord("a") + int(c, 16)) for c in uuid.uuid4().hex[:8])
        self.op.put_operation(name, {"mode": "lease", "on_lease_expiry": "unknown", "lease_seconds": 30,
                                     "max_ttl_seconds": 3600, "retention_seconds": 86400})
        t = self.c.issue(uid("intent"), name, "alice", 300)
        a = self.c.spend(t.body["token"], name, "alice")
        self.assertEqual(a.status, 202)
        self.assertIsNotNone(a.lease)
        done = a.lease.complete(201, {"charge": "ch_1"})
        self.assertEqual(done.status, 200)
        self.assertTrue(a.lease.complete(201, {"charge": "ch_1"}).replayed)
        replay = self.c.spend(t.body["token"], name, "alice")
        self.assertEqual(replay.status, 201)
        self.assertEqual(replay.body["result"], {"charge": "ch_1"})

        t2 = self.c.issue(uid("intent"), name, "alice", 300)
        lease = self.c.spend(t2.body["token"], name, "alice").lease
        lease.unknown()
        with self.assertRaises(OutcomeUnknown):
            self.c.spend(t2.body["token"], name, "alice")
        rec = self.op.reconcile(t2.body["id"], "failed", 402, {"error": "declined"})
        self.assertEqual(rec.body["state"], "failed")

    def test_revoke_and_list(self):
        subject = uid("subj")
        t = self.c.issue(uid("intent"), "ledger.credit", subject, 300, {"account": "a", "amount": 1})
        self.assertEqual(self.op.revoke(t.body["id"], "test").body["state"], "revoked")
        with self.assertRaises(Problem) as cm:
            self.op.revoke(t.body["id"], "again")
        self.assertEqual(cm.exception.code, "invalid_state")
        with self.assertRaises(Problem) as cm:
            self.c.spend(t.body["token"], "ledger.credit", subject, {"account": "a", "amount": 1})
        self.assertEqual(cm.exception.code, "token_revoked")
        ids = [r["id"] for r in self.op.tokens(subject=subject)]
        self.assertEqual(ids, [t.body["id"]])

    def test_follow_the_feed_with_its_epoch(self):
        head = self.c.events(limit=1000)
        cursor = head.body["next_cursor"]
        while head.body["items"]:
            head = self.c.events(after=cursor, limit=1000)
            cursor = head.body["next_cursor"]
        t = self.c.issue(uid("intent"), "ledger.credit", "alice", 300, {"account": uid("a"), "amount": 2})
        epochs = []
        seen = []
        for e in self.c.follow(after=cursor, wait=5, on_epoch=epochs.append):
            seen.append(e)
            if e["token_id"] == t.body["id"]:
                break
        self.assertEqual(seen[-1]["type"], "issued")
        self.assertTrue(epochs and epochs[-1])

    def test_webhook_delivery_verifies(self):
        got = []
        done = threading.Event()

        class Receiver(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()
                done.set()

            def log_message(self, *args):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.server_close)
        self.addCleanup(srv.shutdown)
        key = uid("create")
        hook = self.op.create_webhook("http://127.0.0.1:%d/hook" % srv.server_address[1],
                                      idempotency_key=key, event_types=["issued"])
        self.addCleanup(lambda: self.op._call("DELETE", "/v1/admin/webhooks/" + hook.body["id"]))
        secret = hook.body["secret"]
        self.c.issue(uid("intent"), "ledger.credit", "alice", 300, {"account": "w", "amount": 1})
        self.assertTrue(done.wait(30), "no delivery within 30 s")
        headers, body = got[0]
        verify_webhook(secret, headers, body)
        with self.assertRaises(WebhookVerificationError):
            verify_webhook(secret, headers, body + b"x")

    @unittest.skipUnless(RESTART, "needs scripts/test-clients' restart hook")
    def test_restart_in_the_middle_of_a_spend_has_one_effect(self):
        account = uid("acct")
        payload = {"account": account, "amount": 11}
        t = self.c.issue(uid("intent"), "ledger.credit", "alice", 300, payload)
        # kill -9 tokend and start it again a second later, while the spend is sent.
        restart = threading.Thread(target=subprocess.run, args=([RESTART, "kill", "1"],), kwargs={"check": True})
        restart.start()
        time.sleep(0.05)
        a = self.c.spend(t.body["token"], "ledger.credit", "alice", payload)
        restart.join()
        self.assertEqual(a.status, 200)
        b = self.c.spend(t.body["token"], "ledger.credit", "alice", payload)
        self.assertTrue(b.replayed)
        self.assertEqual(self.balance(account), 11)


if __name__ == "__main__":
    unittest.main()

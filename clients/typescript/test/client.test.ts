// Tests of the TypeScript client: against a real tokend (scripts/test-clients
// starts one and sets TOKEND_CLIENT_TEST_*), and against small local servers
// for the retry rules.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer, IncomingMessage, ServerResponse } from "node:http";
import { AddressInfo } from "node:net";
import { execFile } from "node:child_process";
import { createHmac, randomUUID } from "node:crypto";
import { Client, NoAnswer, OutcomeUnknown, Problem, WebhookVerificationError, verifyWebhook } from "../src/index.js";

const env = process.env;
const URL_ = env.TOKEND_CLIENT_TEST_URL ?? "";
const KEY = env.TOKEND_CLIENT_TEST_KEY ?? "";
const OPERATOR_KEY = env.TOKEND_CLIENT_TEST_OPERATOR_KEY ?? "";
const RESTART = env.TOKEND_CLIENT_TEST_RESTART ?? "";
const real = !!(URL_ && KEY && OPERATOR_KEY);
const uid = (p: string) => `${p}-${randomUUID().slice(0, 12)}`;

type Step = [number, Record<string, string>, string] | "hangup";
async function scripted(steps: Step[]) {
  const seen: { at: number; headers: IncomingMessage["headers"]; body: string }[] = [];
  const srv = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      seen.push({ at: performance.now(), headers: req.headers, body });
      const s = steps.shift() ?? "hangup";
      if (s === "hangup") {
        req.socket.destroy();
        return;
      }
      res.writeHead(s[0], s[1]);
      res.end(s[2]);
    });
  });
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}`, seen, close: () => srv.close() };
}

const problem = (code: string, status: number) => JSON.stringify({ code, status, detail: code });
const pj = { "Content-Type": "application/problem+json" };

test("retries with the same bytes and waits out Retry-After", async () => {
  const s = await scripted([
    [409, { ...pj, "Retry-After": "1" }, problem("in_progress", 409)],
    [201, { "Content-Type": "application/json" }, JSON.stringify({ id: "tok_1", token: "s" })],
  ]);
  try {
    const a = await new Client(s.url, "k").issue("intent-1", { operation: "op", subject: "alice", ttlSeconds: 60, payload: { n: "<é>" } });
    assert.equal(a.status, 201);
    assert.equal(s.seen.length, 2);
    assert.equal(s.seen[0].body, s.seen[1].body);
    assert.equal(s.seen[0].headers["idempotency-key"], "intent-1");
    assert.equal(s.seen[1].headers["idempotency-key"], "intent-1");
    assert.ok(s.seen[1].at - s.seen[0].at >= 900, "Retry-After: 1 was not waited out");
  } finally {
    s.close();
  }
});

test("outcome_unknown is its own error and is not retried", async () => {
  const s = await scripted([[409, pj, problem("outcome_unknown", 409)], [409, pj, problem("outcome_unknown", 409)]]);
  try {
    await assert.rejects(new Client(s.url, "k").spend({ token: "s", operation: "op", subject: "a" }), OutcomeUnknown);
    assert.equal(s.seen.length, 1);
  } finally {
    s.close();
  }
});

test("no answer is its own error, after retries with the same bytes", async () => {
  const s = await scripted([]);
  try {
    const c = new Client(s.url, "k", { retry: { attempts: 2, baseMs: 10, maxMs: 10 } });
    await assert.rejects(c.spend({ token: "s", operation: "op", subject: "a" }), NoAnswer);
    assert.equal(s.seen.length, 2);
    assert.equal(s.seen[0].body, s.seen[1].body);
  } finally {
    s.close();
  }
});

test("a final problem is not retried", async () => {
  const s = await scripted([[422, pj, problem("payload_mismatch", 422)]]);
  try {
    await assert.rejects(new Client(s.url, "k").spend({ token: "s", operation: "op", subject: "a", payload: { a: 1 } }),
      (e: unknown) => e instanceof Problem && e.code === "payload_mismatch");
    assert.equal(s.seen.length, 1);
  } finally {
    s.close();
  }
});

test("issue needs an intent", async () => {
  await assert.rejects(new Client("http://127.0.0.1:1", "k").issue("", { operation: "op", subject: "a", ttlSeconds: 1 }), TypeError);
});

test("webhook signatures verify and refuse", () => {
  const secret = "whsec_" + Buffer.from("0123456789abcdef0123456789abcdef").toString("base64");
  const now = Math.floor(Date.now() / 1000);
  const body = '{"type":"spend"}';
  const sign = (id: string, ts: number, b: string) =>
    "v1," + createHmac("sha256", Buffer.from(secret.slice(6), "base64")).update(`${id}.${ts}.${b}`).digest("base64");
  const h = { "webhook-id": "evt_1", "webhook-timestamp": String(now), "webhook-signature": sign("evt_1", now, body) };
  verifyWebhook(secret, h, body);
  verifyWebhook(["whsec_" + Buffer.alloc(32, 1).toString("base64"), secret], h, body);
  for (const [b, hh] of [
    [body + " ", h],
    [body, { ...h, "webhook-id": "evt_2" }],
    [body, { ...h, "webhook-timestamp": String(now - 3600) }],
    [body, { "webhook-id": "evt_1" }],
  ] as const) {
    assert.throws(() => verifyWebhook(secret, hh as Record<string, string>, b), WebhookVerificationError);
  }
});

test("against a real tokend", { skip: !real && "set by scripts/test-clients: a real tokend" }, async (t) => {
  const c = new Client(URL_, KEY);
  const op = new Client(URL_, OPERATOR_KEY);
  const balance = async (a: string) => (await c.account(a)).body.balance;

  await t.test("issue, replay, spend, double spend", async () => {
    const account = uid("acct");
    const intent = uid("intent");
    const payload = { account, amount: 7 };
    const tok = await c.issue(intent, { operation: "ledger.credit", subject: "alice", ttlSeconds: 300, payload });
    assert.equal(tok.status, 201);
    assert.equal(tok.replayed, false);
    const again = await c.issue(intent, { operation: "ledger.credit", subject: "alice", ttlSeconds: 300, payload });
    assert.equal(again.replayed, true);
    assert.deepEqual([again.body.id, again.body.token], [tok.body.id, tok.body.token]);
    await assert.rejects(c.issue(intent, { operation: "ledger.credit", subject: "alice", ttlSeconds: 300, payload: { account, amount: 8 } }),
      (e: unknown) => e instanceof Problem && e.status === 422 && e.code === "idempotency_key_reused");
    const first = await c.spend({ token: tok.body.token, operation: "ledger.credit", subject: "alice", payload });
    assert.equal(first.status, 200);
    const second = await c.spend({ token: tok.body.token, operation: "ledger.credit", subject: "alice", payload });
    assert.equal(second.replayed, true);
    assert.equal(second.raw, first.raw);
    assert.equal(await balance(account), 7);
    assert.equal((await c.token(tok.body.id)).body.state, "consumed");
  });

  await t.test("lease, complete, unknown, reconcile", async () => {
    const name = "ts.lease." + randomUUID().replace(/[^a-f]/g, "").slice(0, 8).padEnd(3, "a");
    await op.putOperation(name, { mode: "lease", on_lease_expiry: "unknown", lease_seconds: 30, max_ttl_seconds: 3600, retention_seconds: 86400 });
    const tok = await c.issue(uid("intent"), { operation: name, subject: "alice", ttlSeconds: 300 });
    const a = await c.spend({ token: tok.body.token, operation: name, subject: "alice" });
    assert.equal(a.status, 202);
    assert.ok(a.lease);
    await a.lease.complete(201, { charge: "ch_1" });
    assert.equal((await a.lease.complete(201, { charge: "ch_1" })).replayed, true);
    const replay = await c.spend({ token: tok.body.token, operation: name, subject: "alice" });
    assert.equal(replay.status, 201);
    assert.deepEqual(replay.body.result, { charge: "ch_1" });

    const t2 = await c.issue(uid("intent"), { operation: name, subject: "alice", ttlSeconds: 300 });
    const l2 = (await c.spend({ token: t2.body.token, operation: name, subject: "alice" })).lease!;
    await l2.unknown();
    await assert.rejects(c.spend({ token: t2.body.token, operation: name, subject: "alice" }), OutcomeUnknown);
    const rec = await op.reconcile(t2.body.id, { outcome: "failed", status: 402, result: { error: "declined" } });
    assert.equal(rec.body.state, "failed");
  });

  await t.test("revoke and list", async () => {
    const subject = uid("subj");
    const tok = await c.issue(uid("intent"), { operation: "ledger.credit", subject, ttlSeconds: 300, payload: { account: "a", amount: 1 } });
    assert.equal((await op.revoke(tok.body.id, "test")).body.state, "revoked");
    await assert.rejects(op.revoke(tok.body.id, "again"), (e: unknown) => e instanceof Problem && e.code === "invalid_state");
    const ids = [];
    for await (const r of op.tokens({ subject })) ids.push(r.id);
    assert.deepEqual(ids, [tok.body.id]);
  });

  await t.test("follow the feed with its epoch", async () => {
    let head = await c.events({ limit: 1000 });
    let cursor = head.body.next_cursor;
    while (head.body.items.length) {
      head = await c.events({ after: cursor, limit: 1000 });
      cursor = head.body.next_cursor;
    }
    const tok = await c.issue(uid("intent"), { operation: "ledger.credit", subject: "alice", ttlSeconds: 300, payload: { account: "f", amount: 1 } });
    const epochs: string[] = [];
    let last;
    for await (const e of c.follow({ after: cursor, wait: 5, onEpoch: (x) => epochs.push(x) })) {
      last = e;
      if (e.token_id === tok.body.id) break;
    }
    assert.equal(last.type, "issued");
    assert.ok(epochs.at(-1));
  });

  await t.test("a webhook delivery verifies", async () => {
    let resolve!: (v: { headers: IncomingMessage["headers"]; body: string }) => void;
    const got = new Promise<{ headers: IncomingMessage["headers"]; body: string }>((r) => (resolve = r));
    const srv = createServer((req, res) => {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        res.writeHead(204).end();
        resolve({ headers: req.headers, body });
      });
    });
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    try {
      const port = (srv.address() as AddressInfo).port;
      const hook = await op.createWebhook({ url: `http://127.0.0.1:${port}/hook`, event_types: ["issued"] }, uid("create"));
      try {
        await c.issue(uid("intent"), { operation: "ledger.credit", subject: "alice", ttlSeconds: 300, payload: { account: "w", amount: 1 } });
        const d = await Promise.race([got, new Promise<never>((_, rej) => setTimeout(() => rej(new Error("no delivery in 30 s")), 30_000))]);
        verifyWebhook(hook.body.secret, d.headers as Record<string, string>, d.body);
        assert.throws(() => verifyWebhook(hook.body.secret, d.headers as Record<string, string>, d.body + "x"), WebhookVerificationError);
      } finally {
        await op.deleteWebhook(hook.body.id);
      }
    } finally {
      srv.close();
    }
  });

  await t.test("a restart in the middle of a spend has one effect", { skip: !RESTART && "needs the restart hook" }, async () => {
    const account = uid("acct");
    const payload = { account, amount: 11 };
    const tok = await c.issue(uid("intent"), { operation: "ledger.credit", subject: "alice", ttlSeconds: 300, payload });
    // kill -9 tokend and start it again a second later, while the spend is sent.
    const restarted = new Promise<void>((res, rej) => execFile(RESTART, ["kill", "1"], (err) => (err ? rej(err) : res())));
    await new Promise((r) => setTimeout(r, 50));
    const a = await c.spend({ token: tok.body.token, operation: "ledger.credit", subject: "alice", payload });
    await restarted;
    assert.equal(a.status, 200);
    const b = await c.spend({ token: tok.body.token, operation: "ledger.credit", subject: "alice", payload });
    assert.equal(b.replayed, true);
    assert.equal(await balance(account), 11);
  });
});

// The TypeScript client of tokend's REST API, for Node.js 18+ (no runtime
// dependency).
//
// It is bound to intents: issue() needs the caller's intent ID and never makes
// one up, and every retry of one call sends the same Idempotency-Key and the
// same body bytes. Within a time budget (15 s by default, enough to ride out a
// restart or a rolling deploy) it retries what is safe and transient: a network
// error before an answer, 409 in_progress, 429, 502, 503 and 504, waiting at
// least the answer's Retry-After. It never retries other answers, and not 409
// outcome_unknown in particular: that is for an operator to reconcile.
//
// Errors: Problem (tokend answered with an error; .code is stable), its
// subclass OutcomeUnknown, and NoAnswer (no answer arrived: the call may or
// may not have taken effect; the same call again finds out which).

import { createHmac, timingSafeEqual } from "node:crypto";

/** Problem is an error answer of tokend: an RFC 9457 problem with a stable code. */
export class Problem extends Error {
  readonly status: number;
  readonly code: string;
  readonly detail: string;
  readonly body: Record<string, unknown>;
  readonly requestId: string;
  /** retryAfter is the answer's Retry-After in seconds, 0 when absent. */
  readonly retryAfter: number;

  constructor(status: number, body: Record<string, unknown>, requestId = "", retryAfter = 0) {
    const code = typeof body.code === "string" && body.code ? body.code : `http_${status}`;
    const detail = typeof body.detail === "string" ? body.detail : String(body.title ?? "");
    super(`tokend: ${status} ${code}: ${detail}${requestId ? ` [request ${requestId}]` : ""}`);
    this.name = "Problem";
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.body = body;
    this.requestId = requestId;
    this.retryAfter = retryAfter;
  }
}

/** OutcomeUnknown is 409 outcome_unknown: never retried; an operator reconciles the token. */
export class OutcomeUnknown extends Problem {
  constructor(status: number, body: Record<string, unknown>, requestId = "", retryAfter = 0) {
    super(status, body, requestId, retryAfter);
    this.name = "OutcomeUnknown";
  }
}

/** NoAnswer: no answer arrived, even after the retries. Send the same call again to learn the outcome. */
export class NoAnswer extends Error {
  readonly cause: unknown;
  constructor(method: string, path: string, cause: unknown) {
    super(`tokend: ${method} ${path}: no answer (${String((cause as Error)?.message ?? cause)}); ` +
      "the outcome is unknown, send the same call again to learn it");
    this.name = "NoAnswer";
    this.cause = cause;
  }
}

/** WebhookVerificationError: a delivery that does not verify; answer it with a 4xx, apply nothing. */
export class WebhookVerificationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "WebhookVerificationError";
  }
}

/** Retry bounds the retries of one call (times in milliseconds). */
export interface Retry {
  attempts: number;
  baseMs: number;
  maxMs: number;
  budgetMs: number;
}

export const defaultRetry: Retry = { attempts: 30, baseMs: 100, maxMs: 2000, budgetMs: 15000 };

/** Answer is a successful answer: its status, JSON body and whether tokend replayed it. */
export interface Answer<T = any> {
  status: number;
  body: T;
  replayed: boolean;
  requestId: string;
  raw: string;
}

/** Lease is the execution right of a lease-mode spend; report the outcome before it expires. */
export class Lease {
  constructor(
    private readonly client: Client,
    readonly tokenId: string,
    readonly generation: number,
    readonly operationId: string,
    readonly leaseExpiresAt: string,
  ) {}
  complete(status = 200, result?: unknown): Promise<Answer> {
    return this.client.complete(this.tokenId, this.generation, status, result);
  }
  fail(status = 422, error?: unknown): Promise<Answer> {
    return this.client.fail(this.tokenId, this.generation, status, error);
  }
  unknown(): Promise<Answer> {
    return this.client.unknown(this.tokenId, this.generation);
  }
}

export interface SpendAnswer extends Answer {
  /** lease is set on a lease-mode spend's 202 answer. */
  lease?: Lease;
}

export interface ClientOptions {
  retry?: Partial<Retry>;
  /** timeoutMs bounds each attempt (default 120 s). */
  timeoutMs?: number;
  userAgent?: string;
}

interface Call {
  method: string;
  path: string;
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  acceptNon2xxJSON?: boolean;
}

const retryStatuses = new Set([429, 502, 503, 504]);

function retryAfterSeconds(v: string | null): number {
  if (!v) return 0;
  if (/^\d+$/.test(v)) return Number(v);
  const t = Date.parse(v);
  return Number.isNaN(t) ? 0 : Math.max(0, (t - Date.now()) / 1000);
}

const esc = encodeURIComponent;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Client calls one tokend with one API key. */
export class Client {
  readonly base: string;
  readonly retry: Retry;
  readonly timeoutMs: number;
  readonly userAgent: string;
  readonly #key: string;

  constructor(baseURL: string, apiKey: string, opts: ClientOptions = {}) {
    const u = new URL(baseURL);
    if (u.protocol !== "http:" && u.protocol !== "https:") {
      throw new TypeError(`tokend client: base URL ${baseURL}: want http(s)://host[:port]`);
    }
    if (!apiKey) throw new TypeError("tokend client: an API key is required");
    this.base = baseURL.replace(/\/+$/, "");
    this.#key = apiKey;
    this.retry = { ...defaultRetry, ...opts.retry };
    this.timeoutMs = opts.timeoutMs ?? 120_000;
    this.userAgent = opts.userAgent ?? "tokend-typescript-client";
  }

  async call<T = any>(c: Call): Promise<Answer<T>> {
    // Encoded once: every attempt sends these bytes.
    const data = c.body === undefined ? undefined : JSON.stringify(c.body);
    let url = this.base + c.path;
    const q = Object.entries(c.query ?? {}).filter(([, v]) => v !== undefined && v !== "" && v !== 0);
    if (q.length) url += "?" + new URLSearchParams(q.map(([k, v]) => [k, String(v)])).toString();
    const start = Date.now();
    let last: unknown;
    const attempts = Math.max(this.retry.attempts, 1);
    for (let attempt = 0; attempt < attempts; attempt++) {
      let waitAtLeast = 0;
      try {
        return await this.attempt<T>(c, url, data);
      } catch (e) {
        if (e instanceof Problem) {
          if (!(retryStatuses.has(e.status) || (e.status === 409 && e.code === "in_progress"))) throw e;
          waitAtLeast = e.retryAfter * 1000;
        } else if (!(e instanceof NoAnswer)) {
          throw e;
        }
        last = e;
      }
      if (attempt + 1 >= attempts) break;
      const bound = Math.min(this.retry.baseMs * 2 ** Math.min(attempt, 30), this.retry.maxMs);
      const delay = Math.max(bound / 2 + Math.random() * (bound / 2), waitAtLeast);
      if (this.retry.budgetMs && Date.now() - start + delay > this.retry.budgetMs) break;
      await sleep(delay);
    }
    throw last;
  }

  private async attempt<T>(c: Call, url: string, data: string | undefined): Promise<Answer<T>> {
    const headers: Record<string, string> = {
      Authorization: `Bearer ${this.#key}`,
      Accept: "application/json, application/problem+json",
      "User-Agent": this.userAgent,
      ...(data !== undefined ? { "Content-Type": "application/json" } : {}),
      ...c.headers,
    };
    let res: Response;
    let raw: string;
    try {
      res = await fetch(url, { method: c.method, headers, body: data, signal: AbortSignal.timeout(this.timeoutMs) });
      raw = await res.text();
    } catch (e) {
      throw new NoAnswer(c.method, c.path, e);
    }
    const ctype = (res.headers.get("Content-Type") ?? "").split(";")[0].trim();
    const requestId = res.headers.get("X-Request-Id") ?? "";
    if (res.ok || (c.acceptNon2xxJSON && ctype === "application/json")) {
      return {
        status: res.status,
        body: (raw && ctype === "application/json" ? JSON.parse(raw) : undefined) as T,
        replayed: res.headers.get("Idempotent-Replayed") === "true",
        requestId,
        raw,
      };
    }
    let problem: Record<string, unknown> = {};
    try {
      const p = raw ? JSON.parse(raw) : {};
      if (p && typeof p === "object" && !Array.isArray(p)) problem = p;
    } catch {
      problem = { detail: raw.slice(0, 200) };
    }
    const Kind = problem.code === "outcome_unknown" ? OutcomeUnknown : Problem;
    throw new Kind(res.status, problem, requestId, retryAfterSeconds(res.headers.get("Retry-After")));
  }

  // -- tokens --------------------------------------------------------------

  /** issue asks for a token for intentId; the same request again answers the same token (replayed). */
  issue(intentId: string, r: { operation: string; subject: string; ttlSeconds: number; payload?: unknown }): Promise<Answer> {
    if (!intentId) return Promise.reject(new TypeError("tokend client: issue needs the caller's intent ID"));
    const body: Record<string, unknown> = { operation: r.operation, subject: r.subject, ttl_seconds: r.ttlSeconds };
    if (r.payload !== undefined) body.payload = r.payload;
    return this.call({ method: "POST", path: "/v1/tokens", body, headers: { "Idempotency-Key": intentId } });
  }

  /** spend spends a token: the stored outcome, the same on every replay; in lease mode (202) a Lease. */
  async spend(r: { token: string; operation: string; subject: string; payload?: unknown }): Promise<SpendAnswer> {
    const body: Record<string, unknown> = { token: r.token, operation: r.operation, subject: r.subject };
    if (r.payload !== undefined) body.payload = r.payload;
    const a: SpendAnswer = await this.call({ method: "POST", path: "/v1/tokens/consume", body, acceptNon2xxJSON: true });
    if (a.status === 202 && a.body) {
      a.lease = new Lease(this, a.body.token_id, Number(a.body.generation), a.body.operation_id, a.body.lease_expires_at);
    }
    return a;
  }

  complete(tokenId: string, generation: number, status = 200, result?: unknown): Promise<Answer> {
    return this.report(tokenId, "complete", { generation, status, result: result ?? null });
  }
  fail(tokenId: string, generation: number, status = 422, error?: unknown): Promise<Answer> {
    return this.report(tokenId, "fail", { generation, status, error: error ?? null });
  }
  unknown(tokenId: string, generation: number): Promise<Answer> {
    return this.report(tokenId, "unknown", { generation });
  }
  private report(tokenId: string, action: string, body: unknown): Promise<Answer> {
    return this.call({ method: "POST", path: `/v1/tokens/${esc(tokenId)}/${action}`, body });
  }

  /** token reads a token's state and expiry, never its secret. */
  token(id: string): Promise<Answer> {
    return this.call({ method: "GET", path: `/v1/tokens/${esc(id)}` });
  }
  account(account: string): Promise<Answer> {
    return this.call({ method: "GET", path: `/v1/ledger/accounts/${esc(account)}` });
  }

  // -- operators -----------------------------------------------------------

  inspect(id: string): Promise<Answer> {
    return this.call({ method: "GET", path: `/v1/admin/tokens/${esc(id)}` });
  }
  listTokens(f: { state?: string; operation?: string; subject?: string; limit?: number; cursor?: string } = {}): Promise<Answer> {
    return this.call({ method: "GET", path: "/v1/admin/tokens", query: { ...f } });
  }
  /** tokens yields every token that matches, page after page. */
  async *tokens(f: { state?: string; operation?: string; subject?: string } = {}): AsyncGenerator<any> {
    let cursor = "";
    for (;;) {
      const page = (await this.listTokens({ ...f, cursor })).body;
      yield* page.items ?? [];
      cursor = page.next_cursor ?? "";
      if (!cursor) return;
    }
  }
  revoke(id: string, reason = ""): Promise<Answer> {
    return this.call({ method: "POST", path: `/v1/admin/tokens/${esc(id)}/revoke`, body: { reason } });
  }
  reconcile(id: string, r: { outcome: "succeeded" | "not_executed" | "failed"; status?: number; result?: unknown }): Promise<Answer> {
    return this.call({ method: "POST", path: `/v1/admin/tokens/${esc(id)}/reconcile`, body: r });
  }
  purge(): Promise<Answer> {
    return this.call({ method: "POST", path: "/v1/admin/purge", body: {} });
  }
  putOperation(name: string, policy: Record<string, unknown>): Promise<Answer> {
    return this.call({ method: "PUT", path: `/v1/admin/operations/${esc(name)}`, body: policy });
  }
  operations(): Promise<Answer> {
    return this.call({ method: "GET", path: "/v1/admin/operations" });
  }
  /** createWebhook registers an endpoint; pass an idempotencyKey so a retry cannot register it twice. */
  createWebhook(r: { url: string; event_types?: string[] }, idempotencyKey = ""): Promise<Answer> {
    return this.call({ method: "POST", path: "/v1/admin/webhooks", body: r,
      headers: idempotencyKey ? { "Idempotency-Key": idempotencyKey } : undefined });
  }
  webhooks(): Promise<Answer> {
    return this.call({ method: "GET", path: "/v1/admin/webhooks" });
  }
  deleteWebhook(id: string): Promise<Answer> {
    return this.call({ method: "DELETE", path: `/v1/admin/webhooks/${esc(id)}` });
  }
  disableWebhook(id: string): Promise<Answer> {
    return this.call({ method: "POST", path: `/v1/admin/webhooks/${esc(id)}/disable` });
  }
  enableWebhook(id: string): Promise<Answer> {
    return this.call({ method: "POST", path: `/v1/admin/webhooks/${esc(id)}/enable` });
  }
  redeliverWebhook(id: string, selection: Record<string, unknown> = {}): Promise<Answer> {
    return this.call({ method: "POST", path: `/v1/admin/webhooks/${esc(id)}/redeliver`, body: selection });
  }

  // -- the feed ------------------------------------------------------------

  /** events reads one page of the tenant's events: items, next_cursor, epoch. */
  events(r: { after?: string; epoch?: string; limit?: number; wait?: number } = {}): Promise<Answer> {
    return this.call({ method: "GET", path: "/v1/events", query: { ...r } });
  }

  /**
   * follow yields every event after `after`, waiting for new ones. Keep each event's
   * position and the epoch (onEpoch) to resume. A cursor a restored feed cannot honour
   * throws the 409 cursor_epoch Problem, whose detail says where to resume; it never skips.
   */
  async *follow(r: { after?: string; epoch?: string; wait?: number; onEpoch?: (epoch: string) => void } = {}): AsyncGenerator<any> {
    let { after = "", epoch = "" } = r;
    for (;;) {
      let page;
      try {
        page = (await this.events({ after, epoch, wait: r.wait ?? 20 })).body;
      } catch (e) {
        if (e instanceof Problem && e.code === "too_many_waiters") {
          await sleep(Math.max(e.retryAfter, 1) * 1000);
          continue;
        }
        throw e;
      }
      if (page.epoch) epoch = page.epoch;
      r.onEpoch?.(epoch);
      yield* page.items ?? [];
      after = page.next_cursor || after;
    }
  }
}

/**
 * verifyWebhook checks a delivery's Standard Webhooks signature under any of secrets
 * (whsec_ values; several during a rotation's overlap) and that its timestamp is within
 * toleranceSeconds of now. It throws WebhookVerificationError when it does not verify.
 */
export function verifyWebhook(
  secrets: string | string[],
  headers: Record<string, string | string[] | undefined> | Headers,
  body: string | Uint8Array,
  toleranceSeconds = 300,
  nowSeconds = Date.now() / 1000,
): void {
  const get = (name: string): string | undefined => {
    if (headers instanceof Headers) return headers.get(name) ?? undefined;
    for (const [k, v] of Object.entries(headers)) {
      if (k.toLowerCase() === name) return Array.isArray(v) ? v[0] : v;
    }
    return undefined;
  };
  const id = get("webhook-id");
  const ts = get("webhook-timestamp");
  const sigs = get("webhook-signature");
  if (!id || !ts || !sigs) throw new WebhookVerificationError("missing webhook-id, webhook-timestamp or webhook-signature");
  if (!/^\d+$/.test(ts)) throw new WebhookVerificationError("invalid webhook-timestamp");
  const stamp = Number(ts);
  if (stamp < nowSeconds - toleranceSeconds) throw new WebhookVerificationError("message too old");
  if (stamp > nowSeconds + toleranceSeconds) throw new WebhookVerificationError("message timestamp too new");
  const payload = typeof body === "string" ? Buffer.from(body) : Buffer.from(body);
  const signed = Buffer.concat([Buffer.from(`${id}.${stamp}.`), payload]);
  const given = sigs.split(" ").filter((s) => s.startsWith("v1,")).map((s) => Buffer.from(s.slice(3)));
  for (const secret of Array.isArray(secrets) ? secrets : [secrets]) {
    const key = Buffer.from(secret.startsWith("whsec_") ? secret.slice(6) : secret, "base64");
    const want = Buffer.from(createHmac("sha256", key).update(signed).digest("base64"));
    if (given.some((g) => g.length === want.length && timingSafeEqual(g, want))) return;
  }
  throw new WebhookVerificationError("no matching signature");
}

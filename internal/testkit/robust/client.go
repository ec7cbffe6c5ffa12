package robust

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"
)

// Client is one traffic client: real HTTP requests to any of the tokend
// instances, each recorded in the history as it ends.
type Client struct {
	ID       int
	URLs     []string // tokend instances; each request goes to one at random
	Key      string   // client role
	Operator string   // operator role
	History  *History
	HTTP     *http.Client
	Rand     *rand.Rand

	// NotSent counts requests that never reached a server (dial refused):
	// they changed nothing, so they are not recorded.
	NotSent *atomic.Int64
}

// answer is one HTTP exchange: a response, or the error in its place.
type answer struct {
	status   int
	header   http.Header
	body     []byte
	err      error
	notSent  bool
	callMono int64
	callWall int64
	retMono  int64
	retWall  int64
}

func (c *Client) send(ctx context.Context, method, path, key, idem string, body any) answer {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	base := c.URLs[c.Rand.IntN(len(c.URLs))]
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return answer{err: err, notSent: true}
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	var a answer
	a.callMono, a.callWall = c.History.Now()
	resp, err := c.HTTP.Do(req)
	if err == nil {
		a.body, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		a.status, a.header = resp.StatusCode, resp.Header
	}
	a.retMono, a.retWall = c.History.Now()
	if err != nil {
		a.err = err
		var op *net.OpError
		// net/http retries a request that carries an Idempotency-Key
		// even after it was written: only without one does a failed dial
		// mean that no server read it.
		a.notSent = errors.As(err, &op) && op.Op == "dial" && idem == ""
	}
	return a
}

// output reads an answer: 5xx and transport errors are unknown outcomes.
func (a answer) output() Output {
	if a.err != nil {
		return Output{Unknown: true, Err: shortErr(a.err)}
	}
	out := Output{Status: a.status, Replayed: a.header.Get("Idempotent-Replayed") == "true"}
	if strings.HasPrefix(a.header.Get("Content-Type"), "application/problem+json") {
		var p struct {
			Code string `json:"code"`
		}
		_ = json.Unmarshal(a.body, &p)
		out.Code = p.Code
	}
	if a.status >= 500 {
		out.Unknown = true
		out.Err = fmt.Sprintf("%d %s", a.status, out.Code)
	}
	return out
}

func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && len(s) > 80 {
		s = s[i+2:]
	}
	return s
}

func (c *Client) record(in Input, a answer, out Output) Output {
	if a.notSent {
		c.NotSent.Add(1)
		return out
	}
	in.CallWall, in.ReturnWall = a.callWall, a.retWall
	c.History.Add(c.ID, in, out, a.callMono, a.retMono)
	return out
}

// intent is what the traffic knows of one intent.
type intent struct {
	name   string
	lease  bool
	short  bool // lease of 1 s (shortLeaseOperation)
	amount int64
	ttl    int
}

const (
	leaseOperation      = "robust.lease"
	shortLeaseOperation = "robust.shortlease" // 1 s leases; lapsed ones go unknown
)

func (it *intent) operation() string {
	if it.short {
		return shortLeaseOperation
	}
	if it.lease {
		return leaseOperation
	}
	return "ledger.credit"
}

func (it *intent) payload(changed bool) any {
	amount := it.amount
	if changed {
		amount += 100
	}
	if it.lease {
		return map[string]any{"ref": it.name, "amount": amount}
	}
	return map[string]any{"account": it.name, "amount": amount}
}

// Issue sends POST /v1/tokens for it; fingerprint != 0 changes the payload.
func (c *Client) Issue(ctx context.Context, it *intent, fingerprint int) Output {
	a := c.send(ctx, http.MethodPost, "/v1/tokens", c.Key, it.name, map[string]any{
		"operation": it.operation(), "subject": "alice", "ttl_seconds": it.ttl, "payload": it.payload(fingerprint != 0)})
	out := a.output()
	if !out.Unknown && a.status == 201 {
		var b struct {
			ID        string    `json:"id"`
			Token     string    `json:"token"`
			State     string    `json:"state"`
			ExpiresAt time.Time `json:"expires_at"`
		}
		_ = json.Unmarshal(a.body, &b)
		out.ID, out.Secret, out.State, out.ExpiresAt = b.ID, b.Token, b.State, b.ExpiresAt.UnixNano()
	}
	return c.record(Input{Kind: KindIssue, Intent: it.name, Lease: it.lease, ShortLease: it.short, Fingerprint: fingerprint}, a, out)
}

// Spend sends POST /v1/tokens/consume with the token's secret.
func (c *Client) Spend(ctx context.Context, it *intent, secret string, payloadOK bool) Output {
	a := c.send(ctx, http.MethodPost, "/v1/tokens/consume", c.Key, "", map[string]any{
		"token": secret, "operation": it.operation(), "subject": "alice", "payload": it.payload(!payloadOK)})
	out := a.output()
	if !out.Unknown {
		var b struct {
			State      string     `json:"state"`
			Generation int64      `json:"generation"`
			LeaseEnd   *time.Time `json:"lease_expires_at"`
		}
		if a.status < 300 || out.Replayed {
			out.Body = string(a.body)
			_ = json.Unmarshal(a.body, &b)
			out.State, out.Gen = b.State, b.Generation
			if b.LeaseEnd != nil {
				out.LeaseEnd = b.LeaseEnd.UnixNano()
			}
		}
	}
	return c.record(Input{Kind: KindSpend, Intent: it.name, Lease: it.lease, ShortLease: it.short, PayloadOK: payloadOK, Amount: it.amount}, a, out)
}

// Report sends complete, fail or unknown for a lease holder of generation gen.
func (c *Client) Report(ctx context.Context, it *intent, id string, kind Kind, gen int64) Output {
	path := map[Kind]string{KindComplete: "complete", KindFail: "fail", KindUnknown: "unknown"}[kind]
	body := map[string]any{"generation": gen}
	switch kind {
	case KindComplete:
		body["result"] = map[string]any{"done": it.name}
	case KindFail:
		body["error"] = map[string]any{"failed": it.name}
	}
	a := c.send(ctx, http.MethodPost, "/v1/tokens/"+id+"/"+path, c.Key, "", body)
	out := c.stateOf(a)
	return c.record(Input{Kind: kind, Intent: it.name, Lease: true, ShortLease: it.short, Generation: gen}, a, out)
}

// Revoke is the operator's POST /v1/admin/tokens/{id}/revoke.
func (c *Client) Revoke(ctx context.Context, it *intent, id string) Output {
	a := c.send(ctx, http.MethodPost, "/v1/admin/tokens/"+id+"/revoke", c.Operator, "", map[string]any{"reason": "robustness"})
	return c.record(Input{Kind: KindRevoke, Intent: it.name, Lease: it.lease, ShortLease: it.short}, a, c.stateOf(a))
}

// Reconcile is the operator's POST /v1/admin/tokens/{id}/reconcile.
func (c *Client) Reconcile(ctx context.Context, it *intent, id, outcome string) Output {
	body := map[string]any{"outcome": outcome}
	if outcome == "succeeded" {
		body["status"], body["result"] = 200, map[string]any{"reconciled": it.name}
	}
	a := c.send(ctx, http.MethodPost, "/v1/admin/tokens/"+id+"/reconcile", c.Operator, "", body)
	return c.record(Input{Kind: KindReconcile, Intent: it.name, Lease: it.lease, ShortLease: it.short, Outcome: outcome}, a, c.stateOf(a))
}

// Get is GET /v1/tokens/{id}.
func (c *Client) Get(ctx context.Context, it *intent, id string) Output {
	a := c.send(ctx, http.MethodGet, "/v1/tokens/"+id, c.Key, "", nil)
	out := c.stateOf(a)
	if !out.Unknown && a.status == 200 {
		var b struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(a.body, &b)
		out.ID = b.ID
	}
	return c.record(Input{Kind: KindGet, Intent: it.name, Lease: it.lease, ShortLease: it.short}, a, out)
}

func (c *Client) stateOf(a answer) Output {
	out := a.output()
	if !out.Unknown && a.status < 300 {
		var b struct {
			State      string `json:"state"`
			Generation int64  `json:"generation"`
		}
		_ = json.Unmarshal(a.body, &b)
		out.State, out.Gen = b.State, b.Generation
	}
	return out
}

// List is the operator's GET /v1/admin/tokens for operation, newest first,
// with the state filter state ("" for none). Each listed token of an
// intent the traffic knows (known) is recorded as a read of that intent's
// token (KindList) spanning the whole request: the list answers each
// token's state at some moment within it, and makes no promise across
// tokens. A list that got no answer read nothing and is not recorded.
func (c *Client) List(ctx context.Context, operation, state string, known func(name string) *intent) {
	path := "/v1/admin/tokens?limit=20&operation=" + operation
	if state != "" {
		path += "&state=" + state
	}
	a := c.send(ctx, http.MethodGet, path, c.Operator, "", nil)
	if a.err != nil || a.status != 200 {
		return
	}
	var page struct {
		Items []struct {
			ID         string `json:"id"`
			IntentID   string `json:"intent_id"`
			State      string `json:"state"`
			Generation int64  `json:"generation"`
		} `json:"items"`
	}
	if err := json.Unmarshal(a.body, &page); err != nil {
		return
	}
	for _, it := range page.Items {
		in := known(it.IntentID)
		if in == nil {
			continue
		}
		out := Output{Status: 200, ID: it.ID, State: it.State, Gen: it.Generation}
		c.record(Input{Kind: KindList, Intent: in.name, Lease: in.lease, ShortLease: in.short, Filter: state}, a, out)
	}
}

package client

import (
	"context"
	"errors"
	"iter"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrNoIntent is Issue's answer to a request without an IntentID: the client
// never makes one up, since only the caller knows which intent a retry
// belongs to.
var ErrNoIntent = errors.New("client: Issue needs the caller's intent ID (IssueRequest.IntentID)")

// Issue asks for a token for the intent r.IntentID. Asking again for the same
// intent, the same request, answers the same token with Replayed set; a
// different request under the same intent is ErrIdempotencyKeyReused.
func (c *Client) Issue(ctx context.Context, r IssueRequest) (*IssuedToken, error) {
	if r.IntentID == "" {
		return nil, ErrNoIntent
	}
	cl, err := newCall(http.MethodPost, "/v1/tokens", r)
	if err != nil {
		return nil, err
	}
	cl.header.Set("Idempotency-Key", r.IntentID)
	a, err := c.do(ctx, cl, ok)
	if err != nil {
		return nil, err
	}
	var t IssuedToken
	if err := decode(cl, a, &t); err != nil {
		return nil, err
	}
	t.Meta = a.meta()
	return &t, nil
}

// Spend spends a token. In atomic mode the answer is the stored outcome, the
// same on every replay; a business failure the handler declared final is an
// Outcome in State Failed, not an error. In lease mode the answer carries a
// Lease: run the business effect downstream, then report it on the Lease.
func (c *Client) Spend(ctx context.Context, r SpendRequest) (*Outcome, error) {
	cl, err := newCall(http.MethodPost, "/v1/tokens/consume", r)
	if err != nil {
		return nil, err
	}
	// A stored outcome is JSON whatever its status; an error is a problem.
	a, err := c.do(ctx, cl, func(a answer) bool { return ok(a) || isJSON(a) })
	if err != nil {
		return nil, err
	}
	o := &Outcome{Meta: a.meta(), Status: a.status}
	if a.status == http.StatusAccepted {
		var l leaseBody
		if err := decode(cl, a, &l); err != nil {
			return nil, err
		}
		o.TokenID, o.State = l.TokenID, l.State
		o.Lease = &Lease{TokenID: l.TokenID, Generation: l.Generation, OperationID: l.OperationID, ExpiresAt: l.LeaseExpiresAt, c: c}
		return o, nil
	}
	if err := decode(cl, a, o); err != nil {
		return nil, err
	}
	return o, nil
}

// Lease is the execution right a lease-mode spend grants. Its holder runs
// the business effect downstream, with OperationID as the downstream
// idempotency key, and reports the outcome before ExpiresAt with Complete,
// Fail or Unknown, which quote its Generation.
type Lease struct {
	TokenID     string
	Generation  int64
	OperationID string
	ExpiresAt   time.Time
	c           *Client
}

// Complete reports that the business effect happened: status (a 2xx, zero
// for 200) and result are what later spends of the token replay.
func (l *Lease) Complete(ctx context.Context, status int, result any) (*Recorded, error) {
	return l.c.Complete(ctx, l.TokenID, Report{Generation: l.Generation, Status: status, Result: result})
}

// Fail reports a final business failure: status (a 4xx or 5xx, zero for 422)
// and the error body are what later spends replay.
func (l *Lease) Fail(ctx context.Context, status int, errBody any) (*Recorded, error) {
	return l.c.Fail(ctx, l.TokenID, Report{Generation: l.Generation, Status: status, Error: errBody})
}

// Unknown reports that the downstream outcome is unknown: the token waits
// for an operator to reconcile it.
func (l *Lease) Unknown(ctx context.Context) (*Recorded, error) {
	return l.c.Unknown(ctx, l.TokenID, l.Generation)
}

// Complete records a lease holder's success on token id; r.Error must be nil.
// The same report again answers the same Recorded with Replayed set.
func (c *Client) Complete(ctx context.Context, id string, r Report) (*Recorded, error) {
	r.Error = nil
	return c.report(ctx, id, "complete", r)
}

// Fail records a lease holder's final failure on token id; r.Result must be nil.
func (c *Client) Fail(ctx context.Context, id string, r Report) (*Recorded, error) {
	r.Result = nil
	return c.report(ctx, id, "fail", r)
}

// Unknown records that the outcome of generation's execution is unknown.
func (c *Client) Unknown(ctx context.Context, id string, generation int64) (*Recorded, error) {
	return c.report(ctx, id, "unknown", Report{Generation: generation})
}

func (c *Client) report(ctx context.Context, id, action string, r Report) (*Recorded, error) {
	var out Recorded
	m, err := c.send(ctx, http.MethodPost, "/v1/tokens/"+esc(id)+"/"+action, nil, r, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// Token reads token id: its state, expiry and lease, never its secret.
func (c *Client) Token(ctx context.Context, id string) (*Token, error) {
	var out Token
	m, err := c.send(ctx, http.MethodGet, "/v1/tokens/"+esc(id), nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// Account reads a balance of the built-in ledger.credit demo business.
func (c *Client) Account(ctx context.Context, account string) (*Account, error) {
	var out Account
	m, err := c.send(ctx, http.MethodGet, "/v1/ledger/accounts/"+esc(account), nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// The operator's calls below need an operator key.

// Inspect reads token id's full record and audit trail.
func (c *Client) Inspect(ctx context.Context, id string) (*TokenDetail, error) {
	var out TokenDetail
	m, err := c.send(ctx, http.MethodGet, "/v1/admin/tokens/"+esc(id), nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// ListPage reads one page of the tenant's tokens, newest first.
func (c *Client) ListPage(ctx context.Context, f Filter) (*Page, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("state", string(f.State))
	set("operation", f.Operation)
	set("subject", f.Subject)
	set("cursor", f.Cursor)
	if !f.CreatedAfter.IsZero() {
		q.Set("created_after", f.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		q.Set("created_before", f.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out Page
	m, err := c.send(ctx, http.MethodGet, "/v1/admin/tokens", q, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// Pages iterates over the pages of the listing f selects, from f.Cursor on,
// until the last page or the first error, which it yields and stops at.
func (c *Client) Pages(ctx context.Context, f Filter) iter.Seq2[*Page, error] {
	return func(yield func(*Page, error) bool) {
		for {
			p, err := c.ListPage(ctx, f)
			if err != nil {
				yield(nil, err)
				return
			}
			if !yield(p, nil) || p.NextCursor == nil {
				return
			}
			f.Cursor = *p.NextCursor
		}
	}
}

// Tokens iterates over the records of every page of the listing f selects.
func (c *Client) Tokens(ctx context.Context, f Filter) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		for p, err := range c.Pages(ctx, f) {
			if err != nil {
				yield(Record{}, err)
				return
			}
			for _, r := range p.Items {
				if !yield(r, nil) {
					return
				}
			}
		}
	}
}

// Revoke revokes an issued token; the audit trail records reason. A token
// that is not issued, including one this call revoked on an attempt whose
// answer was lost, is ErrInvalidState.
func (c *Client) Revoke(ctx context.Context, id, reason string) (*Record, error) {
	return c.record(ctx, "/v1/admin/tokens/"+esc(id)+"/revoke", struct {
		Reason string `json:"reason"`
	}{reason})
}

// Reconcile settles a token whose outcome is unknown.
func (c *Client) Reconcile(ctx context.Context, id string, r Reconciliation) (*Record, error) {
	return c.record(ctx, "/v1/admin/tokens/"+esc(id)+"/reconcile", r)
}

func (c *Client) record(ctx context.Context, path string, body any) (*Record, error) {
	var out Record
	m, err := c.send(ctx, http.MethodPost, path, nil, body, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// Purge removes the tenant's tokens past their retention, a bounded batch
// per call; repeat it until it purges nothing.
func (c *Client) Purge(ctx context.Context) (*Purged, error) {
	var out Purged
	m, err := c.send(ctx, http.MethodPost, "/v1/admin/purge", nil, struct{}{}, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// PutOperation declares operation name with policy p, or redeclares it.
func (c *Client) PutOperation(ctx context.Context, name string, p Policy) (*Operation, error) {
	return c.operation(ctx, http.MethodPut, name, p)
}

// GetOperation reads operation name's declaration; ErrUnknownOperation if none.
func (c *Client) GetOperation(ctx context.Context, name string) (*Operation, error) {
	return c.operation(ctx, http.MethodGet, name, nil)
}

// DeleteOperation removes operation name's declaration and answers it;
// ErrOperationInUse while the operation has unfinished tokens.
func (c *Client) DeleteOperation(ctx context.Context, name string) (*Operation, error) {
	return c.operation(ctx, http.MethodDelete, name, nil)
}

func (c *Client) operation(ctx context.Context, method, name string, body any) (*Operation, error) {
	var out Operation
	m, err := c.send(ctx, method, "/v1/admin/operations/"+esc(name), nil, body, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// OperationList is the tenant's declared operations.
type OperationList struct {
	Meta  `json:"-"`
	Items []Operation `json:"items"`
}

// Operations lists the tenant's declared operations.
func (c *Client) Operations(ctx context.Context) (*OperationList, error) {
	var out OperationList
	m, err := c.send(ctx, http.MethodGet, "/v1/admin/operations", nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

// Stats counts the tenant's tokens that wait for someone.
func (c *Client) Stats(ctx context.Context) (*Stats, error) {
	var out Stats
	m, err := c.send(ctx, http.MethodGet, "/v1/admin/stats", nil, nil, &out)
	if err != nil {
		return nil, err
	}
	out.Meta = m
	return &out, nil
}

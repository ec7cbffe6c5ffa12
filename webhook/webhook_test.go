package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"golang.org/x/sync/errgroup"

	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// TestSignMatchesTheSpecification: the specification's own example.
func TestSignMatchesTheSpecification(t *testing.T) {
	h, err := webhook.Sign(secret, "msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Get(webhook.HeaderSignature), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Errorf("signature = %s, want %s", got, want)
	}
	if h.Get(webhook.HeaderTimestamp) != "1614265330" || h.Get(webhook.HeaderID) != "msg_p5jXN8AQM9LWM0D4loKWxJek" {
		t.Errorf("headers = %v", h)
	}
}

func TestVerify(t *testing.T) {
	body := []byte(`{"type":"token.spend"}`)
	now := time.Now()
	signed := func(ts time.Time) http.Header {
		h, err := webhook.Sign(secret, "evt_1", ts, body)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	other := "whsec_" + "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
	for _, tc := range []struct {
		name   string
		secret string
		header http.Header
		body   []byte
		want   error
	}{
		{"signed", secret, signed(now), body, nil},
		{"another body", secret, signed(now), []byte(`{"type":"token.revoke"}`), webhook.ErrInvalidSignature},
		{"another secret", other, signed(now), body, webhook.ErrInvalidSignature},
		{"another id", secret, func() http.Header { h := signed(now); h.Set(webhook.HeaderID, "evt_2"); return h }(), body, webhook.ErrInvalidSignature},
		{"another time", secret, func() http.Header {
			h := signed(now)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
			return h
		}(), body, webhook.ErrInvalidSignature},
		{"too old", secret, signed(now.Add(-6 * time.Minute)), body, webhook.ErrTooOld},
		{"too new", secret, signed(now.Add(6 * time.Minute)), body, webhook.ErrTooNew},
		{"no headers", secret, http.Header{}, body, webhook.ErrMissingHeaders},
		{"a rotated secret among the signatures", secret, func() http.Header {
			h := signed(now)
			o, _ := webhook.Sign(other, "evt_1", now, body)
			h.Set(webhook.HeaderSignature, o.Get(webhook.HeaderSignature)+" "+h.Get(webhook.HeaderSignature))
			return h
		}(), body, nil},
		{"a malformed secret", "whsec_%%%", signed(now), body, webhook.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := webhook.Verify(tc.secret, tc.header, tc.body)
			if (tc.want == nil) != (err == nil) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Errorf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestReceiveRefusesABodyOfAnotherEvent(t *testing.T) {
	body := []byte(`{"type":"token.spend","timestamp":"2026-01-01T00:00:00Z","data":{"id":"evt_2"}}`)
	h, err := webhook.Sign(secret, "evt_1", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header = h
	if _, err := webhook.Receive(secret, r); !errors.Is(err, webhook.ErrInvalid) {
		t.Errorf("Receive = %v, want ErrInvalid", err)
	}
}

// TestOnceTxUnderConcurrentDeliveries: 8 deliveries of one event at once,
// each applying its effect in the transaction that records the event: one
// effect.
func TestOnceTxUnderConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, webhook.Schema); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE effects (event_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				first, err := webhook.OnceTx(ctx, tx, "evt_1")
				if err != nil || !first {
					return err
				}
				_, err = tx.Exec(ctx, `INSERT INTO effects VALUES ('evt_1')`)
				return err
			})
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM effects`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("effects = %d (%v), want 1", n, err)
	}
	// A delivery whose transaction rolled back leaves no mark: the next one
	// is the first again.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first, err := webhook.OnceTx(ctx, tx, "evt_2"); err != nil || !first {
		t.Fatalf("OnceTx evt_2 = %v, %v", first, err)
	}
	_ = tx.Rollback(ctx)
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		first, err := webhook.OnceTx(ctx, tx, "evt_2")
		if err == nil && !first {
			err = errors.New("after a rollback, not first")
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRotationOverlapVerifiesUnderEither: a delivery signed under the old
// and the new secret, as tokend signs during a rotation's overlap, carries
// both signatures in one header; a receiver holding either secret verifies
// it (with this package and with the Standard Webhooks library directly),
// and one holding neither does not.
func TestRotationOverlapVerifiesUnderEither(t *testing.T) {
	old, next := secret, "whsec_"+"QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo="
	stranger := "whsec_" + "c3RyYW5nZXItc2VjcmV0LTAxMjM0NTY3ODk="
	body := []byte(`{"type":"token.spend"}`)
	h, err := webhook.SignAll([]string{next, old}, "evt_1", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	if sigs := strings.Fields(h.Get(webhook.HeaderSignature)); len(sigs) != 2 {
		t.Fatalf("webhook-signature = %q, want two signatures", h.Get(webhook.HeaderSignature))
	}
	for _, s := range []string{old, next} {
		if err := webhook.Verify(s, h, body); err != nil {
			t.Errorf("Verify under %s: %v", s, err)
		}
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(body, h); err != nil {
			t.Errorf("the Standard Webhooks library under %s: %v", s, err)
		}
	}
	if err := webhook.VerifyAny([]string{stranger, next}, h, body); err != nil {
		t.Errorf("VerifyAny with the new secret second: %v", err)
	}
	if err := webhook.VerifyAny([]string{stranger}, h, body); !errors.Is(err, webhook.ErrInvalidSignature) {
		t.Errorf("VerifyAny with neither = %v, want ErrInvalidSignature", err)
	}
	if err := webhook.Verify(stranger, h, body); !errors.Is(err, webhook.ErrInvalidSignature) {
		t.Errorf("Verify with neither = %v, want ErrInvalidSignature", err)
	}
	if err := webhook.VerifyAny(nil, h, body); !errors.Is(err, webhook.ErrInvalid) {
		t.Errorf("VerifyAny with no secret = %v, want ErrInvalid", err)
	}
}

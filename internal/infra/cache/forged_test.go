package cache

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/tokend/tokend/token"
)

type ridKey struct{}

// syncBuffer is a log destination goroutines can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestForgedEntriesNeverAnswer is the attack the MAC stops: someone who can
// write to Redis, but does not hold the server key, plants an API-key
// resolution, a refusal and a token record, each well-formed, in the
// layout the cache reads, and copies a genuine entry to another key. None
// is believed: each is a miss, counted as forged, logged with the request
// id and without the value, and removed.
func TestForgedEntriesNeverAnswer(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	c, mr, obs := openMini(t, Config{
		MACKey:    MACKey([]byte("the real server key, which the attacker lacks")),
		Logger:    log,
		RequestID: func(ctx context.Context) string { s, _ := ctx.Value(ridKey{}).(string); return s },
	})
	attacker := &Cache{macKey: MACKey([]byte("a key the attacker made up for himself!"))}
	ctx := context.WithValue(context.Background(), ridKey{}, "req-forged-1")

	// A refusal of a spend that Postgres would let through.
	secretHash := bytes.Repeat([]byte{9}, 32)
	secKey := c.secretKey("acme", secretHash)
	refusal := []byte(`{"tenant":"acme","operation":"o","subject":"s","state":"revoked"}`)
	for _, raw := range []string{"0::" + string(refusal), attacker.seal(secKey, 0, refusal)} {
		mr.Set(secKey, raw)
		if err := c.Rejected(ctx, "acme", secretHash, "o", "s"); err != nil {
			t.Fatalf("forged refusal %q believed: %v", raw, err)
		}
	}

	// A genuine entry of one token copied to another token's key.
	a, b := record("acme"), record("acme")
	d := newDB(a, b)
	if _, err := c.GetOrLoad(ctx, "acme", a.ID, d.loader("acme", a.ID)); err != nil {
		t.Fatal(err)
	}
	genuine, err := c.rdb.Get(ctx, c.tokenKey("acme", a.ID)).Result()
	if err != nil {
		t.Fatal(err)
	}
	mr.Set(c.tokenKey("acme", b.ID), genuine)
	if got, ok := c.Get(ctx, "acme", b.ID); ok {
		t.Fatalf("an entry moved to another key was served: %+v", got)
	}

	if n := obs.count(kindSecret, resultForged) + obs.count(kindToken, resultForged); n != 3 {
		t.Errorf("forged counted %d times, want 3", n)
	}
	for _, k := range []string{secKey, c.tokenKey("acme", b.ID)} {
		if mr.Exists(k) {
			t.Errorf("forged entry at %s left in place", k)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 3 || strings.Count(out, "request_id=req-forged-1") != 3 {
		t.Errorf("want 3 warnings with the request id, got:\n%s", out)
	}
	for _, secret := range []string{"revoked", a.ID} {
		if strings.Contains(out, secret) {
			t.Errorf("the log carries %q from a forged entry:\n%s", secret, out)
		}
	}
}

// TestNoOutcomeInRedisOrMemory: a token read whose row holds a stored
// result leaves neither the result nor what else no read shows (intent id,
// payload digest) in Redis or in process, and returns none of it either:
// replays come from Postgres.
func TestNoOutcomeInRedisOrMemory(t *testing.T) {
	ctx := context.Background()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			c, _ := b.open(t, Config{})
			rec := withOutcome(record("acme"), []byte(`{"charge":"ch_SECRETOUTCOME"}`))
			rec.State, rec.Generation = token.Consumed, 1
			d := newDB(rec)
			got, err := c.GetOrLoad(ctx, "acme", rec.ID, d.loader("acme", rec.ID))
			if err != nil {
				t.Fatal(err)
			}
			if got.ResultBody != nil || got.ResultStatus != 0 || got.PayloadDigest != nil || got.IntentID != "" {
				t.Errorf("GetOrLoad returned what no read shows: %+v", got)
			}
			raw, err := c.rdb.Get(ctx, c.tokenKey("acme", rec.ID)).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, leak := range []string{"SECRETOUTCOME", "intent-1", `"ResultStatus":200`, "AQID"} {
				if strings.Contains(raw, leak) {
					t.Errorf("Redis holds %q: %s", leak, raw)
				}
			}
			held, ok := c.local.get("acme", rec.ID)
			if !ok {
				t.Fatal("the terminal token was not kept in process")
			}
			if held.ResultBody != nil || held.IntentID != "" || held.PayloadDigest != nil {
				t.Errorf("the process holds what no read shows: %+v", held)
			}
		})
	}
}

package apikey

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/internal/infra/store"
)

// Backoff between attempts to listen again, and how long the listening
// connection may sit idle before Watch checks that it is still there.
const (
	watchMinBackoff = 100 * time.Millisecond
	watchMaxBackoff = 5 * time.Second
	watchPingEvery  = 30 * time.Second
	watchPingWait   = 5 * time.Second
	// watchProbeWait is how long a self-notification may take to be heard;
	// watchPollEvery how often cached resolutions are dropped when it was
	// not.
	watchProbeWait = 5 * time.Second
	watchPollEvery = 5 * time.Second
)

// probePayload is the payload of the self-notification Watch sends once it
// listens, to check that notifications reach it.
const probePayload = "probe"

// errNotHeard: Watch listens, but its own notification never came. Behind
// a transaction-pooling proxy, LISTEN and NOTIFY run on backends of their
// own and nothing is delivered.
var errNotHeard = errors.New("a notification sent after LISTEN was not heard")

// Watch tells a process of every API key revoked on pool's database, by
// Revoke in any process, so it can drop what it caches about the key at once
// instead of when that expires. It calls revoked with the key's hash (what
// api_keys.key_hash holds, the SHA-256 of the key) once the revocation has
// committed.
//
// Watch listens on a connection of its own, taken out of pool. Each time it
// starts listening, the first time and after losing the connection, it
// calls reset: Postgres tells only those listening, so a revocation made
// while Watch was not may never be told, and the caller must drop every
// resolution it holds. A notification whose payload is not a key hash calls
// reset too. revoked and reset run on Watch's goroutine, one at a time.
//
// Once listening, Watch notifies itself and waits for it. When that is not
// heard (LISTEN through a transaction-pooling proxy hears nothing), it says
// so at WARN and falls back to calling reset every watchPollEvery, so a
// revocation reaches the caller's caches within that time.
//
// Watch tries again with backoff after every failure, logging it to log
// (nil: slog.Default()), and returns ctx's error once ctx ends.
func Watch(ctx context.Context, pool *pgxpool.Pool, revoked func(keyHash []byte), reset func(), log *slog.Logger) error {
	w := watcher{pool: pool, revoked: revoked, reset: reset, log: log,
		probeWait: watchProbeWait, pollEvery: watchPollEvery,
		probe: func(ctx context.Context) error {
			return store.NotifyAPIKeys(ctx, pool, probePayload)
		}}
	return w.run(ctx)
}

func (w watcher) run(ctx context.Context) error {
	if w.log == nil {
		w.log = slog.Default()
	}
	log := w.log
	backoff := watchMinBackoff
	for {
		listened, err := w.listen(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, errNotHeard) {
			return w.poll(ctx)
		}
		if listened {
			backoff = watchMinBackoff
		}
		// Up to half again as long, so that servers losing one database do
		// not all come back at the same instant.
		wait := backoff + rand.N(backoff/2+1)
		log.Warn("api key revocations: not listening; cached key resolutions are dropped when listening again",
			"err", err, "retry_in", wait.String())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, watchMaxBackoff)
	}
}

type watcher struct {
	pool    *pgxpool.Pool
	revoked func(keyHash []byte)
	reset   func()
	log     *slog.Logger
	probe   func(context.Context) error // sends probePayload on the channel

	probeWait, pollEvery time.Duration // watchProbeWait, watchPollEvery
}

// poll drops every cached resolution every watchPollEvery until ctx ends.
func (w watcher) poll(ctx context.Context) error {
	w.log.Warn("api key revocations: LISTEN hears nothing here (a transaction-pooling proxy? set TOKEND_DATABASE_SESSION_URL); "+
		"dropping cached key resolutions every "+w.pollEvery.String()+" instead", "err", errNotHeard)
	t := time.NewTicker(w.pollEvery)
	defer t.Stop()
	for {
		w.reset()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// listen listens until the connection fails or ctx ends; listened reports
// whether it got as far as listening.
func (w watcher) listen(ctx context.Context) (listened bool, err error) {
	pc, err := w.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	// Out of the pool for good: a connection still listening must never
	// serve a query, and only this function closes it.
	conn := pc.Hijack()
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	if err := store.ListenAPIKeys(ctx, conn); err != nil {
		return false, err
	}
	w.reset()
	if err := w.probe(ctx); err != nil {
		return true, err
	}
	heard, cancel := context.WithTimeout(ctx, w.probeWait)
	defer cancel()
	for probed := false; ; {
		n, err := wait(heard, conn)
		switch {
		case !probed && heard.Err() != nil && ctx.Err() == nil:
			return true, errNotHeard
		case err != nil:
			return true, err
		case !probed && n == probePayload:
			probed, heard = true, ctx
			continue
		case n == probePayload:
			continue // another instance's probe
		}
		h, err := hex.DecodeString(n)
		if err != nil || len(h) != sha256.Size {
			w.log.Warn("api key revocations: a notification that names no key; dropping every cached key resolution", "payload_len", len(n))
			w.reset()
			continue
		}
		w.revoked(h)
	}
}

// wait returns the payload of the next notification on conn. A connection
// idle for watchPingEvery is pinged, so that one lost without a word from
// the network is noticed within seconds, not when TCP gives up on it.
func wait(ctx context.Context, conn *pgx.Conn) (payload string, err error) {
	for {
		idle, cancel := context.WithTimeout(ctx, watchPingEvery)
		n, err := conn.WaitForNotification(idle)
		timedOut := idle.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			return n.Payload, nil
		case !timedOut || conn.IsClosed():
			return "", err
		}
		// A timeout leaves the connection usable (pgconn closes it on any
		// other error), so ask it whether it is still there.
		pctx, cancel := context.WithTimeout(ctx, watchPingWait)
		err = conn.Ping(pctx)
		cancel()
		if err != nil {
			return "", errors.Join(errors.New("listening connection lost"), err)
		}
	}
}

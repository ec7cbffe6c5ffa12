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
)

// Backoff between attempts to listen again, and how long the listening
// connection may sit idle before Watch checks that it is still there.
const (
	watchMinBackoff = 100 * time.Millisecond
	watchMaxBackoff = 5 * time.Second
	watchPingEvery  = 30 * time.Second
	watchPingWait   = 5 * time.Second
)

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
// Watch tries again with backoff after every failure, logging it to log
// (nil: slog.Default()), and returns ctx's error once ctx ends.
func Watch(ctx context.Context, pool *pgxpool.Pool, revoked func(keyHash []byte), reset func(), log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	w := watcher{pool: pool, revoked: revoked, reset: reset, log: log}
	backoff := watchMinBackoff
	for {
		listened, err := w.listen(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
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
	if _, err := conn.Exec(ctx, listenSQL); err != nil {
		return false, err
	}
	w.reset()
	for {
		n, err := wait(ctx, conn)
		if err != nil {
			return true, err
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

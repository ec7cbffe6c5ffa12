package cache

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/internal/testkit/redistest"
	"github.com/tokend/tokend/token"
)

// slowRedis returns the address of a proxy in front of target that holds
// every reply for delay on average (from half to one and a half times
// it), as a distant or loaded Redis would. Requests pass at once; replies
// keep their order on each connection.
func slowRedis(t *testing.T, target string, delay time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			client, err := l.Accept()
			if err != nil {
				return
			}
			go relayDelayed(client, target, delay)
		}
	}()
	return l.Addr().String()
}

func relayDelayed(client net.Conn, target string, delay time.Duration) {
	server, err := net.Dial("tcp", target)
	if err != nil {
		client.Close()
		return
	}
	go func() {
		_, _ = io.Copy(server, client)
		server.Close()
	}()
	type chunk struct {
		b   []byte
		due time.Time
	}
	replies := make(chan chunk, 4096)
	go func() {
		defer client.Close()
		for c := range replies {
			time.Sleep(time.Until(c.due))
			if _, err := client.Write(c.b); err != nil {
				server.Close()
				for range replies {
				}
				return
			}
		}
	}()
	var due time.Time
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			// Latency varies, as it does: some replies overtake others
			// on other connections, never on their own.
			due = later(due, time.Now().Add(delay/2+rand.N(delay)))
			replies <- chunk{bytes.Clone(buf[:n]), due}
		}
		if err != nil {
			close(replies)
			return
		}
	}
}

// TestReadYourWritesThroughSlowRedis is the protocol's proof. Two Caches
// share one Redis (two servers) whose replies take 25ms. In each round
// readers on both read a token without pause, while a writer commits a
// change to it, during a load that read the row before, and invalidates
// through one of the two, as a handler does before it answers. A read that began after the invalidation returned
// (after the response, for a client) and still shows the state from
// before is stale. There must be none, in any round, on either Cache.
func TestReadYourWritesThroughSlowRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("rounds of reads through a slow Redis")
	}
	// The real Redis, for its real TTLs: entries must expire for reads to
	// keep loading and filling.
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	addr := slowRedis(t, opt.Addr, 25*time.Millisecond) + "/" + strconv.Itoa(opt.DB)
	macKey := MACKey([]byte("the server key shared by both instances"))
	prefix := "tokend-test:ryw:" + token.NewID() + ":"
	newInstance := func() *Cache {
		// A short TokenTTL keeps entries expiring, so that reads keep
		// missing and loading and filling, where the races are.
		c, err := New(Config{URL: "redis://" + addr, Prefix: prefix, MACKey: macKey, Timeout: testTimeout, TokenTTL: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	instances := []*Cache{newInstance(), newInstance()}
	t.Cleanup(func() {
		ctx := context.Background()
		iter := instances[0].rdb.Scan(ctx, 0, prefix+"*", 100).Iterator()
		for iter.Next(ctx) {
			instances[0].rdb.Del(ctx, iter.Val())
		}
	})

	const rounds = 20
	var stale, reads, afterReads atomic.Int64
	for round := range rounds {
		base := record("acme")
		base.State = token.Issued
		d := newDB(base)
		// The change: a lease (issued to pending, next generation) or a
		// spend (issued to consumed, terminal, kept in process).
		changed := base
		if round%2 == 0 {
			changed.State, changed.Generation = token.Pending, 1
		} else {
			changed.State = token.Consumed
		}
		want, _ := version(changed.State, changed.Generation)
		// Postgres reads the row, then its answer takes a while to come
		// back. The change commits while a load that read the row before
		// it is under way, as when a GET and a spend cross.
		loadRead := make(chan struct{}, 1)
		slowLoad := func(ctx context.Context) (token.Record, error) {
			rec, err := d.loader("acme", base.ID)(ctx)
			select {
			case loadRead <- struct{}{}:
			default:
			}
			time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
			return rec, err
		}

		var answered atomic.Int64 // UnixNano when the invalidation returned; 0 before
		stop := make(chan struct{})
		var wg sync.WaitGroup
		// Reads arrive like requests do, each on its own, about one per
		// millisecond on each instance, whether earlier ones are done or
		// not.
		for _, c := range instances {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						began := time.Now().UnixNano()
						rec, err := c.GetOrLoad(context.Background(), "acme", base.ID, slowLoad)
						if err != nil {
							t.Error(err)
							return
						}
						reads.Add(1)
						if a := answered.Load(); a != 0 && began > a {
							afterReads.Add(1)
							if v, _ := version(rec.State, rec.Generation); v < want {
								stale.Add(1)
							}
						}
					}()
				}
			}()
		}
		select {
		case <-loadRead:
		case <-time.After(10 * time.Second):
			t.Fatal("no load began")
		}
		time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
		d.commit(changed)
		instances[round%2].Invalidate(context.Background(), "acme", base.ID, changed.State, changed.Generation)
		answered.Store(time.Now().UnixNano())
		time.Sleep(100 * time.Millisecond)
		close(stop)
		wg.Wait()
	}
	t.Logf("%d reads, %d begun after the change was answered", reads.Load(), afterReads.Load())
	if afterReads.Load() < rounds {
		t.Fatalf("only %d reads began after a change was answered; the test proves nothing", afterReads.Load())
	}
	if n := stale.Load(); n != 0 {
		t.Fatalf("%d reads begun after the change was answered showed the state from before it", n)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

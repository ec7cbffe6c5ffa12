package httpapi_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/internal/infra/cache"
	"github.com/tokend/tokend/internal/serve/httpapi"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/internal/testkit/redistest"
)

// slowRedis returns the address of a proxy in front of target that holds
// every reply for delay on average (from half to one and a half times
// it), as a distant or loaded Redis would.
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
			go func() {
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
						// Latency varies, as it does: some replies overtake
						// others on other connections, never on their own.
						due = later(due, time.Now().Add(delay/2+rand.N(delay)))
						replies <- chunk{bytes.Clone(buf[:n]), due}
					}
					if err != nil {
						close(replies)
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestCacheReadYourWritesAcrossInstances: two servers share a Postgres and
// a Redis whose replies take 25ms. Token reads arrive at both all along;
// meanwhile a spend is made on one of them. A read that began after the
// spend was answered, on either server, must show the token consumed.
func TestCacheReadYourWritesAcrossInstances(t *testing.T) {
	t.Parallel()
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	url := "redis://" + slowRedis(t, opt.Addr, 25*time.Millisecond) + "/" + strconv.Itoa(opt.DB)
	prefix := fmt.Sprintf("tokend-test:%s:%d:", t.Name(), time.Now().UnixNano())
	redistest.Forget(t, prefix)
	macKey := cache.MACKey([]byte("the server key both instances have"))
	withShared := func(hc *httpapi.Config) {
		c, err := cache.New(cache.Config{URL: url, Prefix: prefix, MACKey: macKey, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		hc.Cache = c
	}
	pool := pgtest.NewPool(t)
	servers := []*api{newAPIOn(t, pool, withShared), newAPIOn(t, pool, withShared)}
	key := servers[0].client()

	const rounds = 10
	var stale, after atomic.Int64
	for round := range rounds {
		tok := servers[0].issue(key, fmt.Sprint("ryw-", round), creditBody("erin", 1))
		var answered atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, s := range servers {
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
						res := s.get(key, "/v1/tokens/"+tok.ID)
						if res.status != http.StatusOK {
							t.Errorf("read: %d %s", res.status, res.body)
							return
						}
						if a := answered.Load(); a != 0 && began > a {
							after.Add(1)
							if !strings.Contains(string(res.body), `"state":"consumed"`) {
								stale.Add(1)
							}
						}
					}()
				}
			}()
		}
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		if res := servers[round%2].post(key, "/v1/tokens/consume", consumeBody(tok, "erin", 1)); res.status != http.StatusOK {
			t.Fatalf("spend: %d %s", res.status, res.body)
		}
		answered.Store(time.Now().UnixNano())
		time.Sleep(100 * time.Millisecond)
		close(stop)
		wg.Wait()
	}
	if after.Load() < rounds {
		t.Fatalf("only %d reads began after a spend was answered; the test proves nothing", after.Load())
	}
	if n := stale.Load(); n != 0 {
		t.Fatalf("%d of %d reads begun after the spend was answered showed the token before it", n, after.Load())
	}
	if got := servers[0].balance("acme", "erin"); got != rounds {
		t.Fatalf("balance = %d, want %d", got, rounds)
	}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

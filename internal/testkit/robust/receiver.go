package robust

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tokend/tokend/webhook"
)

// Receiver is a webhook endpoint of the kit's own. It verifies every
// delivery and counts, by event id, those it answered 2xx: a held delivery
// whose sender died before the answer does not count. Armed,
// it holds the next delivery until released, so that a fault can kill the
// instance whose dispatcher sent it while it is in flight.
type Receiver struct {
	srv *httptest.Server

	mu        sync.Mutex
	secret    string
	delivered map[string]int           // event id -> deliveries answered 2xx
	events    map[string]webhook.Event // event id -> the event as delivered
	received  int                      // verified deliveries, cut ones included
	cut       int                      // held deliveries whose sender died
	bad       []string                 // deliveries that failed verification
	hold      chan heldDelivery        // armed: the next delivery is sent here
}

// heldDelivery is a delivery the receiver holds: from is its sender's
// address, release lets it answer.
type heldDelivery struct {
	from    string
	release chan struct{}
}

// StartReceiver starts a Receiver; it is closed when t ends.
func StartReceiver(t testing.TB) *Receiver {
	r := &Receiver{delivered: map[string]int{}, events: map[string]webhook.Event{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	secret := r.secret
	r.mu.Unlock()
	d, err := webhook.Receive(secret, req)
	if err != nil {
		r.mu.Lock()
		r.bad = append(r.bad, err.Error())
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.received++
	hold := r.hold
	r.hold = nil
	r.mu.Unlock()
	if hold != nil {
		h := heldDelivery{from: req.RemoteAddr, release: make(chan struct{})}
		hold <- h
		<-h.release
		// A kill closed the sender's end: give the server a moment to see
		// it. Such a delivery is answered to no one and does not count.
		select {
		case <-req.Context().Done():
			r.mu.Lock()
			r.cut++
			r.mu.Unlock()
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	w.WriteHeader(http.StatusNoContent)
	r.mu.Lock()
	r.delivered[d.Data.ID]++
	r.events[d.Data.ID] = d.Data
	r.mu.Unlock()
}

// URL is the receiver's address.
func (r *Receiver) URL() string { return r.srv.URL }

// Register registers hookURL (the receiver's URL, or a layer before it) as
// the tenant's webhook endpoint for every event type, with the operator
// key op.
func (r *Receiver) Register(ctx context.Context, t testing.TB, base, op, hookURL string) {
	body := fmt.Sprintf(`{"url":%q}`, hookURL)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/admin/webhooks", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+op)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "robust-webhook")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("register the webhook: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("register the webhook: %d %s", resp.StatusCode, b)
	}
	var hook struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(b, &hook); err != nil || hook.Secret == "" {
		t.Fatalf("register the webhook: no secret in %s (%v)", b, err)
	}
	r.mu.Lock()
	r.secret = hook.Secret
	r.mu.Unlock()
}

// Hold arms the receiver and waits up to wait for a delivery to hold; it
// returns the held delivery, or false (and disarms) when none came.
func (r *Receiver) Hold(ctx context.Context, wait time.Duration) (heldDelivery, bool) {
	ch := make(chan heldDelivery, 1)
	r.mu.Lock()
	r.hold = ch
	r.mu.Unlock()
	select {
	case h := <-ch:
		return h, true
	case <-ctx.Done():
	case <-time.After(wait):
	}
	r.mu.Lock()
	if r.hold == ch {
		r.hold = nil
	}
	r.mu.Unlock()
	select { // armed just as the wait ended
	case h := <-ch:
		close(h.release)
	default:
	}
	return heldDelivery{}, false
}

// Check waits until every event of the feed was delivered at least once
// (the dispatchers redeliver what a dead one left in flight once its lease
// runs out), for at most two minutes and while deliveries still come (20 s
// without one ends the wait), and says what is wrong: an event
// never delivered, a delivery of an event the feed does not hold or that
// differs from it, a delivery that failed verification. readFeed reads
// the whole feed; it is read again until it stops growing, since the
// sweeper goes on expiring tokens and lapsing leases after the traffic.
func (r *Receiver) Check(ctx context.Context, t testing.TB, readFeed func() []Event) []string {
	deadline := time.Now().Add(2 * time.Minute)
	var missing []string
	var feed []Event
	lastCount, lastProgress := -1, time.Now()
	for {
		r.mu.Lock()
		if r.received != lastCount {
			lastCount, lastProgress = r.received, time.Now()
		}
		r.mu.Unlock()
		grown := false
		if fresh := readFeed(); len(fresh) != len(feed) {
			feed, grown = fresh, true
		}
		missing = missing[:0]
		r.mu.Lock()
		for _, e := range feed {
			if r.delivered[e.ID] == 0 {
				missing = append(missing, e.ID)
			}
		}
		r.mu.Unlock()
		if len(missing) == 0 && !grown || time.Now().After(deadline) || time.Since(lastProgress) > 20*time.Second || ctx.Err() != nil {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var problems []string
	for i, id := range missing {
		if i == 10 {
			problems = append(problems, fmt.Sprintf("webhooks: … and %d more events never delivered", len(missing)-10))
			break
		}
		problems = append(problems, fmt.Sprintf("webhooks: event %s is in the feed but was never delivered (answered 2xx): a lost delivery", id))
	}
	inFeed := map[string]Event{}
	for _, e := range feed {
		inFeed[e.ID] = e
	}
	dups := 0
	for _, id := range slices.Sorted(mapsKeys(r.delivered)) {
		n := r.delivered[id]
		dups += n - 1
		d := r.events[id]
		f, ok := inFeed[id]
		switch {
		case !ok:
			problems = append(problems, fmt.Sprintf("webhooks: event %s (token %s, %s) was delivered %d time(s) but is not in the feed", id, d.TokenID, d.To, n))
		case d.TokenID != f.TokenID || d.To != f.To || d.Generation != f.Generation || d.Position != f.Position:
			problems = append(problems, fmt.Sprintf("webhooks: event %s delivered as token %s ->%s gen %d position %d, the feed has token %s ->%s gen %d position %d",
				id, d.TokenID, d.To, d.Generation, d.Position, f.TokenID, f.To, f.Generation, f.Position))
		}
	}
	for _, b := range r.bad {
		problems = append(problems, "webhooks: a delivery failed verification: "+b)
	}
	t.Logf("webhooks: %d events in the feed, %d delivered, %d deliveries received (%d cut by a kill, %d repeats answered 2xx)",
		len(feed), len(r.delivered), r.received, r.cut, dups)
	return problems
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// socketOwner is which of pids holds the loopback TCP socket whose local
// port is port: the instance at the other end of a connection the kit sees
// (a delivery's sender, a Postgres backend's client). -1 when none does.
func socketOwner(port int, pids []int) int {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 {
				continue
			}
			local := fields[1]
			i := strings.LastIndexByte(local, ':')
			if i < 0 {
				continue
			}
			p, err := strconv.ParseUint(local[i+1:], 16, 32)
			if err == nil && int(p) == port {
				inodes["socket:["+fields[9]+"]"] = true
			}
		}
		fh.Close()
	}
	if len(inodes) == 0 {
		return -1
	}
	for i, pid := range pids {
		if pid == 0 {
			continue
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if link, err := os.Readlink(fd); err == nil && inodes[link] {
				return i
			}
		}
	}
	return -1
}

// portOf is the port of a host:port address, 0 if it has none.
func portOf(addr string) int {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(p)
	return n
}

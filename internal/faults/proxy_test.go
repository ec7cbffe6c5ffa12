package faults

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy forwards TCP connections to upstream. The first connections it
// was told to cut are closed as soon as the upstream starts to answer: the
// request was read and handled (tokend answers a spend after its commit) but
// the client never gets the response, as when a network path dies.
type cutProxy struct {
	ln       net.Listener
	upstream string
	toCut    atomic.Int64 // connections still to cut
	cut      atomic.Int64 // connections cut after the upstream answered
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // open, closed by close
	closed bool
}

// startCutProxy listens on a free loopback port until t ends.
func startCutProxy(t testing.TB, upstream string, cuts int) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.toCut.Store(int64(cuts))
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// URL is the proxy's base URL.
func (p *cutProxy) URL() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		cut := p.toCut.Add(-1) >= 0
		p.wg.Go(func() { p.forward(down, cut) })
	}
}

func (p *cutProxy) forward(down net.Conn, cut bool) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		down.Close()
		return
	}
	defer p.untrack(down, up)
	if !p.track(down, up) {
		return
	}
	p.wg.Go(func() { _, _ = io.Copy(up, down) }) // the request; ends when either closes
	if !cut {
		_, _ = io.Copy(down, up)
		return
	}
	var first [1]byte
	if _, err := io.ReadFull(up, first[:]); err == nil {
		p.cut.Add(1)
	}
}

// track records open connections, so that close can end them; false once
// the proxy is closed.
func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return !p.closed
}

func (p *cutProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

package robust

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy between tokend and Postgres that the nemeses
// break: it can add latency, stop forwarding (a blackhole: bytes are held,
// as a partitioned TCP path holds them, until it heals), or reset every
// open connection at once, mid-transaction or mid-commit.
type Proxy struct {
	ln       net.Listener
	upstream string
	latency  atomic.Int64 // ns added before each forwarded chunk
	holes    atomic.Bool

	mu     sync.Mutex
	healed *sync.Cond
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// StartProxy listens on a free loopback port until t ends.
func StartProxy(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
	p.healed = sync.NewCond(&p.mu)
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is host:port to point tokend at.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every chunk by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Blackhole stops (true) or resumes (false) all forwarding.
func (p *Proxy) Blackhole(on bool) {
	p.holes.Store(on)
	if !on {
		p.mu.Lock()
		p.healed.Broadcast()
		p.mu.Unlock()
	}
}

// Reset ends every open connection with a TCP RST.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
		n++
	}
	return n
}

func (p *Proxy) accept() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.forward(down) })
	}
}

func (p *Proxy) forward(down net.Conn) {
	p.wait()
	up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		down.Close()
		return
	}
	if !p.track(down, up) {
		return
	}
	defer p.untrack(down, up)
	done := make(chan struct{}, 2)
	pump := func(dst, src net.Conn) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.wait()
				if d := p.latency.Load(); d > 0 {
					time.Sleep(time.Duration(d))
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}
	go pump(up, down)
	go pump(down, up)
	<-done // either side ended: end both
}

// wait blocks while the blackhole is on.
func (p *Proxy) wait() {
	if !p.holes.Load() {
		return
	}
	p.mu.Lock()
	for p.holes.Load() && !p.closed {
		p.healed.Wait()
	}
	p.mu.Unlock()
}

func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	if p.closed {
		for _, c := range cs {
			c.Close()
		}
	}
	return !p.closed
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(p.conns, c)
	}
}

func (p *Proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.holes.Store(false)
	p.healed.Broadcast()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

package robust

import (
	"math"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// History records requests as they end: each with its start and end on a
// monotonic clock (ns since the recorder began) and the client that sent it.
type History struct {
	start time.Time // carries a monotonic reading

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewHistory starts a history now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the monotonic time of the history and the wall time with it.
func (h *History) Now() (mono, wall int64) {
	d := time.Since(h.start)
	return int64(d), h.start.Add(d).UnixNano()
}

// Add records one request. A request whose outcome is unknown ends at
// infinity: it may take effect at any time after it started.
func (h *History) Add(client int, in Input, out Output, call, ret int64) {
	if out.Unknown {
		ret = math.MaxInt64
	}
	h.mu.Lock()
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret})
	h.mu.Unlock()
}

// Operations is a copy of what was recorded so far.
func (h *History) Operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]porcupine.Operation(nil), h.ops...)
}

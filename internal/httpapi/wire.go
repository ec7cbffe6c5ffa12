package httpapi

import (
	"bytes"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// tokend's answers are the client package's types: each JSON shape of the
// API is declared once, there, and what tokend sends is what the client
// reads (the contract test checks both against the OpenAPI document).

// timeFormat is RFC 3339 in UTC with the database's microseconds, always
// six digits, so that a time renders the same way on every replay.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// wireOptions encode an answer with encoding/json's rules, except times,
// which are written in timeFormat. A time is appended to the encoder's own
// buffer: formatting it into a string first cost three allocations a time,
// and an answer has up to four.
var wireOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsonv2.WithMarshalers(jsonv2.MarshalToFunc(func(e *jsontext.Encoder, t time.Time) error {
		var buf [len(timeFormat) + 8]byte
		b := append(buf[:0], '"')
		b = t.UTC().AppendFormat(b, timeFormat)
		return e.WriteValue(append(b, '"'))
	})),
)

// bodies are the buffers WriteJSON encodes into; c.Data copies a body into
// the response before WriteJSON returns its buffer.
var bodies = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxPooledBody is the largest buffer WriteJSON returns to bodies; a larger
// one (a long page of events) is left to the garbage collector.
const maxPooledBody = 64 << 10

// WriteJSON answers with v, one of the client package's types, as JSON:
// the handlers of mounted routes answer with it too. A pointer to the value
// encodes the same and saves the encoder a copy of it (reflect.New).
func WriteJSON(c *gin.Context, status int, v any) {
	buf := bodies.Get().(*bytes.Buffer)
	defer func() {
		if buf.Cap() <= maxPooledBody {
			buf.Reset()
			bodies.Put(buf)
		}
	}()
	if err := jsonv2.MarshalWrite(buf, v, wireOptions); err != nil {
		Abort(c, err)
		return
	}
	c.Data(status, "application/json", buf.Bytes())
}

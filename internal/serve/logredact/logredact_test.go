package logredact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

const (
	tokenSecret = "tks_9Z0iQStd9EyoBdxB1UTWBjaItBJLIsC9MdHf3nAmMfg"
	apiKey      = "tkd_Jx2m5bqGm3ttA7V1nYl0c0yqvGzUd8qkQm7S1vNoX2E"
)

func TestRedact(t *testing.T) {
	tests := []struct{ in, want string }{
		{tokenSecret, "tks_" + Marker},
		{"/v1/tokens/" + tokenSecret + "/complete", "/v1/tokens/tks_" + Marker + "/complete"},
		{"token=" + tokenSecret + "&x=1", "token=tks_" + Marker + "&x=1"},
		{"Bearer " + apiKey, "Bearer tkd_" + Marker},
		{"Token " + apiKey + ", " + tokenSecret, "Token tkd_" + Marker + ", tks_" + Marker},
		{"k=tks%5F" + tokenSecret[4:], "k=tks_" + Marker},
		{"k=TKS_" + tokenSecret[4:], "k=TKS_" + Marker},
		{"truncated tks_9Z0iQ", "truncated tks_" + Marker},
		{"tks_… is what Secret.String shows", "tks_… is what Secret.String shows"},
		{"tok_01jde4w7y8m3r5t6v9x0a1b2c3 key_abc", "tok_01jde4w7y8m3r5t6v9x0a1b2c3 key_abc"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

type request struct {
	Path   string
	Header map[string]string
}

type stringer struct{ s string }

func (s stringer) String() string { return s.s }

// TestHandler: whatever a log call is given, the line written holds no
// secret and says where one was.
func TestHandler(t *testing.T) {
	for _, format := range []string{"json", "text"} {
		var buf bytes.Buffer
		var inner slog.Handler = slog.NewJSONHandler(&buf, nil)
		if format == "text" {
			inner = slog.NewTextHandler(&buf, nil)
		}
		log := slog.New(New(inner))
		calls := []func(){
			func() { log.Info("got " + tokenSecret) },
			func() { log.Info("request", "path", "/v1/tokens/"+tokenSecret) },
			func() { log.Warn("header", slog.Group("h", slog.String("X-Token", apiKey))) },
			func() { log.Error("failed", "error", fmt.Errorf("panic: bad token %q", tokenSecret)) },
			func() { log.Error("failed", "error", errors.New(apiKey)) },
			func() {
				log.Info("any", "req", request{Path: "/" + tokenSecret, Header: map[string]string{"Referer": apiKey}})
			},
			func() { log.Info("stringer", "v", stringer{tokenSecret}) },
			func() { log.Info("bytes", "b", []byte(apiKey)) },
			func() { log.With("authorization", "Bearer "+apiKey).Info("with") },
			func() { log.WithGroup("g").With("q", "token="+tokenSecret).Info("group") },
			func() { log.Info("key as attribute name", tokenSecret, 1) },
			// Past a record's five inline attributes, as in an access log line.
			func() { log.Info("request", accessAttrs("/v1/tokens/"+tokenSecret)...) },
			func() {
				log.LogAttrs(t.Context(), slog.LevelInfo, "request", slog.String("route", "/x"), slog.Any("v", stringer{apiKey}))
			},
		}
		for i, call := range calls {
			buf.Reset()
			call()
			line := buf.String()
			if strings.Contains(line, tokenSecret[4:]) || strings.Contains(line, apiKey[4:]) {
				t.Errorf("%s call %d: the line holds a secret: %s", format, i, line)
			}
			if !strings.Contains(line, Marker) {
				t.Errorf("%s call %d: no %s in %s", format, i, Marker, line)
			}
		}
	}
}

// TestHandlerKeepsOtherValues: values without a secret reach the handler
// unchanged, with their types.
func TestHandlerKeepsOtherValues(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(New(slog.NewJSONHandler(&buf, nil)))
	log.Info("ok", "n", 3, "s", "plain", "err", errors.New("boom"), "m", map[string]int{"a": 1})
	if want := `"msg":"ok","n":3,"s":"plain","err":"boom","m":{"a":1}}`; !strings.Contains(buf.String(), want) {
		t.Errorf("line = %s, want it to end %s", buf.String(), want)
	}
	h := New(slog.NewJSONHandler(&buf, nil))
	if New(h) != h {
		t.Error("New wrapped a Handler in another")
	}
}

// accessAttrs are the attributes of an access log line for path.
func accessAttrs(path string) []any {
	return []any{"request_id", "5f0c1e7a9b3d4c2e8f6a1b0c9d8e7f6a", "method", "POST", "route", "/v1/tokens/:id",
		"status", 200, "bytes", 112, "duration", 3 * time.Millisecond, "tenant", "acme", "key_id", "key_3u424noljthjbb35tqnkek98oc", "path", path}
}

// BenchmarkAccessLine: an access log line with nothing to redact, through the
// Handler and without it.
func BenchmarkAccessLine(b *testing.B) {
	attrs := accessAttrs("/v1/tokens/consume")
	for _, bm := range []struct {
		name string
		h    slog.Handler
	}{
		{"redacting", New(slog.NewJSONHandler(io.Discard, nil))},
		{"bare", slog.NewJSONHandler(io.Discard, nil)},
	} {
		b.Run(bm.name, func(b *testing.B) {
			log := slog.New(bm.h)
			b.ReportAllocs()
			for b.Loop() {
				log.Info("request", attrs...)
			}
		})
	}
}

package cache

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisLogsAreJSON: go-redis's own complaint about a Redis it cannot
// reach comes out as a JSON log record, not a plain-text line.
func TestRedisLogsAreJSON(t *testing.T) {
	var buf syncBuffer
	LogRedisTo(slog.New(slog.NewJSONHandler(&buf, nil)))
	t.Cleanup(func() { LogRedisTo(slog.Default()) })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	_ = c.Ping(context.Background()).Err() // fails: nothing listens on port 1
	out := buf.String()
	if out == "" {
		t.Skip("this go-redis version logged nothing for a failed dial")
	}
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil || rec["level"] != "WARN" || !strings.HasPrefix(rec["msg"].(string), "redis: ") {
			t.Errorf("log line %q is not a WARN JSON record from redis (%v)", line, err)
		}
	}
}

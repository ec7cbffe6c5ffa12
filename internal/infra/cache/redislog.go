package cache

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// LogRedisTo sends go-redis's own log lines (dial failures, pool and
// cluster notices), which it otherwise prints as plain text on stderr, to
// log as WARN records, so every line tokend writes is one JSON object.
// go-redis keeps one logger per process.
func LogRedisTo(log *slog.Logger) {
	redis.SetLogger(redisLogger{log})
}

type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis: "+strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}

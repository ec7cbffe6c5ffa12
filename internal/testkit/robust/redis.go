package robust

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tokend/tokend/internal/testkit/pgcluster"
)

// RedisServer is a throwaway redis-server of one scenario's own on a free
// port, so it can be killed, flushed and rolled back to an old snapshot
// without touching the shared one.
type RedisServer struct {
	t    testing.TB
	bin  string
	dir  string
	Port int

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis starts redis-server; t is skipped when there is none.
func StartRedis(t testing.TB) *RedisServer {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("no redis-server on PATH")
	}
	dir := t.TempDir()
	r := &RedisServer{t: t, bin: bin, dir: dir, Port: pgcluster.FreePort(t)}
	if err := r.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	return r
}

// URL is the server's redis:// URL.
func (r *RedisServer) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", r.Port) }

func (r *RedisServer) start() error {
	cmd := exec.Command(r.bin, "--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--save", "", "--appendonly", "no", "--dbfilename", "dump.rdb", "--protected-mode", "no")
	if err := cmd.Start(); err != nil {
		return err
	}
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	c := r.client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server did not answer: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *RedisServer) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(r.Port), MaxRetries: -1})
}

// Kill ends the server with SIGKILL: with no persistence it comes back empty.
func (r *RedisServer) Kill() {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd = nil
	r.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Restart starts the server again on its port, loading dump.rdb if there is one.
func (r *RedisServer) Restart() error { return r.start() }

// Flush is FLUSHALL: every cached entry gone at once.
func (r *RedisServer) Flush(ctx context.Context) error {
	c := r.client()
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

// Snapshot saves the data set now, to be restored later.
func (r *RedisServer) Snapshot(ctx context.Context) (string, error) {
	c := r.client()
	defer c.Close()
	if err := c.Save(ctx).Err(); err != nil {
		return "", err
	}
	data, err := os.ReadFile(filepath.Join(r.dir, "dump.rdb"))
	if err != nil {
		return "", err
	}
	snap := filepath.Join(r.dir, fmt.Sprintf("snap-%d.rdb", time.Now().UnixNano()))
	return snap, os.WriteFile(snap, data, 0o644)
}

// RestoreSnapshot kills the server and starts it from snap: the cache
// goes back in time, as after a restart from an old RDB file.
func (r *RedisServer) RestoreSnapshot(snap string) error {
	r.Kill()
	data, err := os.ReadFile(snap)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.dir, "dump.rdb"), data, 0o644); err != nil {
		return err
	}
	return r.start()
}

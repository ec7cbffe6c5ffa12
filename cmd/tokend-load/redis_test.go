package main

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
)

func TestRedisDBSizeAndFlush(t *testing.T) {
	m := miniredis.RunT(t)
	m.Select(3)
	m.Set("a", "1")
	m.Set("b", "2")
	u := "redis://" + m.Addr() + "/3"
	if n, err := redisDBSize(u); err != nil || n != 2 {
		t.Fatalf("DBSIZE = %d, %v; want 2", n, err)
	}
	if n, err := redisDBSize("redis://" + m.Addr() + "/0"); err != nil || n != 0 {
		t.Fatalf("DBSIZE of db 0 = %d, %v; want 0", n, err)
	}
	if err := redisFlushDB(u); err != nil {
		t.Fatal(err)
	}
	if n, err := redisDBSize(u); err != nil || n != 0 {
		t.Fatalf("after FLUSHDB: %d, %v", n, err)
	}
	if _, err := redisDBSize("http://nope"); err == nil {
		t.Fatal("accepted a non-redis URL")
	}
}

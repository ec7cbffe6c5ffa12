package main

import (
	"context"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

func TestRedisDBSizeAndFlush(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	m.Select(3)
	m.Set("a", "1")
	m.Set("b", "2")
	u := "redis://" + m.Addr() + "/3"
	if n, err := redisDBSize(ctx, u); err != nil || n != 2 {
		t.Fatalf("DBSIZE = %d, %v; want 2", n, err)
	}
	if n, err := redisDBSize(ctx, "redis://"+m.Addr()+"/0"); err != nil || n != 0 {
		t.Fatalf("DBSIZE of db 0 = %d, %v; want 0", n, err)
	}
	// FLUSHDB empties the database the URL names and no other.
	m.DB(0).Set("other", "x")
	if err := redisFlushDB(ctx, u); err != nil {
		t.Fatal(err)
	}
	if n, err := redisDBSize(ctx, u); err != nil || n != 0 {
		t.Fatalf("after FLUSHDB: %d, %v", n, err)
	}
	if !m.DB(0).Exists("other") {
		t.Fatal("FLUSHDB of db 3 emptied db 0")
	}
	if _, err := redisDBSize(ctx, "http://nope"); err == nil {
		t.Fatal("accepted a non-redis URL")
	}
}

func TestRedisAuth(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	m.RequireUserAuth("bench", "s3cret")
	m.Set("a", "1")
	if n, err := redisDBSize(ctx, "redis://bench:s3cret@"+m.Addr()+"/0"); err != nil || n != 1 {
		t.Fatalf("DBSIZE with AUTH = %d, %v; want 1", n, err)
	}
	if _, err := redisDBSize(ctx, "redis://bench:wrong@"+m.Addr()+"/0"); err == nil {
		t.Fatal("a wrong password was accepted")
	}
	// An error about a malformed URL does not quote its password.
	if _, err := redisDBSize(ctx, "redis://bench:s3cret@"+m.Addr()+"/%zz"); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("malformed URL: %v", err)
	}
}

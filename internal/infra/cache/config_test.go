package cache

import (
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "" for valid
	}{
		{"zero", Config{}, ""},
		{"all set", Config{URL: "redis://localhost:6379/0", Prefix: "x:", TokenTTL: time.Second, KeyTTL: time.Second,
			Timeout: time.Millisecond, BreakerThreshold: 1, BreakerCooldown: time.Second, LocalTTL: time.Second, LocalMax: 1}, ""},
		{"local layer off", Config{LocalTTL: -1}, ""},
		{"negative token TTL", Config{TokenTTL: -1}, "TokenTTL"},
		{"negative key TTL", Config{KeyTTL: -1}, "KeyTTL"},
		{"negative timeout", Config{Timeout: -1}, "Timeout"},
		{"negative threshold", Config{BreakerThreshold: -1}, "BreakerThreshold"},
		{"negative cool-down", Config{BreakerCooldown: -1}, "BreakerCooldown"},
		{"negative local max", Config{LocalMax: -1}, "LocalMax"},
		{"negative local bytes", Config{LocalMaxBytes: -1}, "LocalMaxBytes"},
		{"derived MAC key", Config{MACKey: MACKey([]byte("k")), PreviousMACKeys: [][]byte{MACKey([]byte("old"))}}, ""},
		{"short MAC key", Config{MACKey: []byte("short")}, "MACKey"},
		{"short previous MAC key", Config{PreviousMACKeys: [][]byte{[]byte("short")}}, "PreviousMACKeys"},
		{"negative probe interval", Config{ProbeInterval: -1}, "ProbeInterval"},
		{"negative probe timeout", Config{ProbeTimeout: -1}, "ProbeTimeout"},
		{"bad scheme", Config{URL: "http://localhost"}, "scheme"},
		{"unknown parameter", Config{URL: "redis://localhost?bogus=1"}, "bogus"},
		{"unparseable", Config{URL: "redis://:secretpw@local host"}, "invalid character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate = %v, want an error about %s", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "secretpw") {
				t.Errorf("the error gives the password away: %v", err)
			}
			if _, err := New(tt.cfg); err == nil {
				t.Error("New accepted what Validate refuses")
			}
		})
	}
}

func TestParseURL(t *testing.T) {
	const ms50 = 50 * time.Millisecond
	tests := []struct {
		url         string
		wantCluster bool
		// Options of the client built, for the single-server kinds.
		read    time.Duration
		retries int // after go-redis's normalisation: 0 is none
	}{
		{url: "redis://localhost:6379/0", read: ms50, retries: 0},
		{url: "rediss://user:pw@localhost:6380/2", read: ms50, retries: 0},
		{url: "redis://localhost:6379/0?read_timeout=2s&max_retries=2", read: 2 * time.Second, retries: 2},
		{url: "redis://localhost:7000?addr=localhost:7001&addr=localhost:7002", wantCluster: true},
		{url: "redis://localhost:26379?master_name=main&addr=localhost:26380", read: ms50, retries: 0},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			build, err := parseURL(tt.url, ms50)
			if err != nil {
				t.Fatal(err)
			}
			c := build()
			defer c.Close()
			switch c := c.(type) {
			case *redis.ClusterClient:
				if !tt.wantCluster {
					t.Fatal("built a cluster client")
				}
				o := c.Options()
				if o.ReadTimeout != ms50 || o.DialTimeout != ms50 || o.MaxRetries != -1 || o.DialerRetries != 1 {
					t.Errorf("cluster options: read %v, dial %v, retries %d, dial attempts %d",
						o.ReadTimeout, o.DialTimeout, o.MaxRetries, o.DialerRetries)
				}
			case *redis.Client:
				if tt.wantCluster {
					t.Fatal("built a single-server client")
				}
				o := c.Options()
				if o.ReadTimeout != tt.read || o.WriteTimeout != ms50 || o.DialTimeout != ms50 || o.PoolTimeout != ms50 {
					t.Errorf("timeouts: read %v, write %v, dial %v, pool %v", o.ReadTimeout, o.WriteTimeout, o.DialTimeout, o.PoolTimeout)
				}
				if o.MaxRetries != tt.retries || o.DialerRetries != 1 {
					t.Errorf("retries %d, dial attempts %d, want %d, 1", o.MaxRetries, o.DialerRetries, tt.retries)
				}
			default:
				t.Fatalf("built a %T", c)
			}
		})
	}
}

package main

import (
	"net/http"
	"time"

	"github.com/tokend/tokend/client"
)

// requestTimeout bounds one attempt of a request. tokend bounds its answers
// by its write timeout (a minute); this only catches a server that hangs.
const requestTimeout = 2 * time.Minute

// timeFormat is how tokend writes times, used for the tables so that they
// show what --json shows.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

func newClient(base, key string) (*client.Client, error) {
	return client.New(base, key,
		client.WithUserAgent("tokenctl"),
		client.WithHTTPClient(&http.Client{Timeout: requestTimeout}))
}

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/valyala/fasthttp"
)

// api is the load's HTTP client of one tokend. It is fasthttp's, not
// tokend's client package on net/http, whose transport hands every request
// to two goroutines of its connection: the load generator shares the CPUs
// with tokend and Postgres, as pgbench shares them with Postgres on the
// limit's side, and what it spends is taken from both. Sampled from /proc
// during issues at C = 8: 125 µs of the load's CPU per request through the
// client package, 70 with fasthttp (pgbench: about 27 per transaction).
type api struct {
	hc   *fasthttp.HostClient
	base string // the URL every path is appended to
	auth string // the Authorization header
}

// newAPI returns a keep-alive client of tgt for up to conns concurrent
// requests. Each run gets its own, so runs do not share connections.
func newAPI(tgt target, conns int) (*api, error) {
	u, err := url.Parse(tgt.base)
	if err != nil {
		return nil, fmt.Errorf("tokend URL %q: %w", tgt.base, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("tokend URL %q: want http://host:port", tgt.base)
	}
	tls := u.Scheme == "https"
	return &api{
		hc: &fasthttp.HostClient{
			Addr: fasthttp.AddMissingPort(u.Host, tls), IsTLS: tls, Name: "tokend-load",
			MaxConns: conns, MaxIdleConnDuration: 30 * time.Second,
			ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second,
			// Every call is sent once: a retry would hide what the run measures.
			RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return false, false },
		},
		base: strings.TrimSuffix(tgt.base, "/"),
		auth: "Bearer " + tgt.key,
	}, nil
}

// close closes the idle connections.
func (a *api) close() { a.hc.CloseIdleConnections() }

// answer is a response, its body copied out of fasthttp's buffers.
type answer struct {
	status   int
	body     []byte
	replayed string // the Idempotent-Replayed header
}

// do sends one request. header is name, value pairs; body is sent as JSON.
func (a *api) do(method, path string, body []byte, header ...string) (answer, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(a.base + path)
	req.Header.SetMethod(method)
	req.Header.Set("Authorization", a.auth)
	req.Header.Set("Accept", "application/json, application/problem+json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	if body != nil {
		req.Header.SetContentType("application/json")
		req.SetBodyRaw(body)
	}
	if err := a.hc.Do(req, resp); err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode(), body: append([]byte(nil), resp.Body()...),
		replayed: string(resp.Header.Peek("Idempotent-Replayed"))}, nil
}

// expect returns a's body when its status is want, else an error naming the
// call, the status, and the problem's code and detail (or the body's start).
func (a answer) expect(call string, want int) ([]byte, error) {
	if a.status == want {
		return a.body, nil
	}
	code, detail := a.problem()
	if code == "" {
		code, detail = strings.ToLower(strings.ReplaceAll(http.StatusText(a.status), " ", "_")), strings.TrimSpace(string(a.body))
	}
	return nil, fmt.Errorf("%s: status %d %s: %.200s", call, a.status, code, detail)
}

// problem is the code and detail of a's problem body, "" when it has none.
func (a answer) problem() (code, detail string) {
	var p struct{ Code, Detail string }
	_ = json.Unmarshal(a.body, &p)
	return p.Code, p.Detail
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const (
	// requestTimeout bounds one request. tokend bounds its answers by its
	// write timeout (a minute); this only catches a server that hangs.
	requestTimeout = 2 * time.Minute
	// maxResponseBytes bounds an answer read into memory: a full page of
	// tokens with large stored results stays well below it.
	maxResponseBytes = 32 << 20
)

// client calls tokend's REST API with an API key.
type client struct {
	base string // scheme://host[:port][/prefix], without a trailing slash
	key  string
	http *http.Client
}

func newClient(base, key string) *client {
	return &client{base: base, key: key, http: &http.Client{Timeout: requestTimeout}}
}

// apiError is an error answer of the API: its problem's status, code and
// detail.
type apiError struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Error returns the problem's code and detail, as the API gave them.
func (e *apiError) Error() string { return e.Code + ": " + e.Detail }

func (c *client) get(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodGet, path, nil)
}

func (c *client) post(ctx context.Context, path string, body any) ([]byte, error) {
	return c.do(ctx, http.MethodPost, path, body)
}

func (c *client) put(ctx context.Context, path string, body any) ([]byte, error) {
	return c.do(ctx, http.MethodPut, path, body)
}

func (c *client) delete(ctx context.Context, path string) ([]byte, error) {
	return c.do(ctx, http.MethodDelete, path, nil)
}

// do sends a request, with body as JSON unless it is nil, and returns the
// body of a 2xx answer. Any other answer is an *apiError.
func (c *client) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "tokenctl")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err // *url.Error names the method and URL; never the key
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, req.URL.Redacted(), err)
	case len(b) > maxResponseBytes:
		return nil, fmt.Errorf("%s %s: the answer is over %d bytes", method, req.URL.Redacted(), maxResponseBytes)
	case resp.StatusCode/100 == 2:
		return b, nil
	}
	return nil, problem(resp, b)
}

// problem is the *apiError of an error answer. A body that is not a problem
// (a proxy's error page, say) is quoted, shortened, as the detail.
func problem(resp *http.Response, body []byte) *apiError {
	e := &apiError{}
	if json.Unmarshal(body, e) != nil || e.Code == "" {
		e.Code = strings.ToLower(strings.ReplaceAll(http.StatusText(resp.StatusCode), " ", "_"))
		e.Detail = strings.TrimSpace(string(body))
		if len(e.Detail) > 200 {
			e.Detail = e.Detail[:200] + "…"
		}
		e.Detail = fmt.Sprintf("HTTP %d %s", resp.StatusCode, e.Detail)
	}
	e.Status = resp.StatusCode
	return e
}

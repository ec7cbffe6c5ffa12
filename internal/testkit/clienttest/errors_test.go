package clienttest_test

import (
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/openapi"
)

// retried are the codes the client sends again; every other is final.
var retried = map[string]bool{"in_progress": true, "rate_limited": true, "too_many_waiters": true, "unavailable": true, "operation_changing": true}

// TestEveryProblemCodeMapsToItsSentinel answers each code the OpenAPI
// document lists and checks errors.Is with its sentinel and no other,
// errors.As to a *Problem with the request id, and whether it was retried.
func TestEveryProblemCodeMapsToItsSentinel(t *testing.T) {
	t.Parallel()
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	sentinels := client.Sentinels()
	if got, want := slices.Sorted(maps.Keys(sentinels)), slices.Sorted(maps.Keys(problems)); !slices.Equal(got, want) {
		t.Fatalf("sentinels %v\ndocument  %v", got, want)
	}
	for code, doc := range problems {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			w := &wire{}
			ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				rw.Header().Set("Content-Type", "application/problem+json")
				rw.Header().Set("X-Request-Id", "req-1")
				rw.WriteHeader(doc.Status)
				fmt.Fprintf(rw, `{"type":"/problems/%s","title":%q,"status":%d,"detail":"d","code":%q}`, code, doc.Title, doc.Status, code)
			}))
			defer ts.Close()
			c := newClient(t, ts.URL, "k", w)
			_, err := c.Token(t.Context(), "tok_1")
			var p *client.Problem
			if !errors.As(err, &p) || p.Code != code || p.Status != doc.Status || p.RequestID != "req-1" || p.Detail != "d" {
				t.Fatalf("err = %#v, want a *Problem %d %s with request id req-1", err, doc.Status, code)
			}
			for other, s := range sentinels {
				if errors.Is(err, s) != (other == code) {
					t.Errorf("errors.Is(err, sentinel of %s) = %v", other, errors.Is(err, s))
				}
			}
			want := 1
			if retried[code] {
				want = 5 // every attempt
			}
			if n := len(w.requests()); n != want {
				t.Errorf("sent %d requests, want %d", n, want)
			}
		})
	}
}

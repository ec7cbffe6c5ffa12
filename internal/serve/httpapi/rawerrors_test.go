package httpapi

import (
	"bufio"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tokend/tokend/openapi"
)

// TestGoRefusalsAreProblems: the answers net/http gives before any handler
// runs, 417 for an Expect other than 100-continue, 501 for a
// Transfer-Encoding other than chunked and 505 for HTTP/2.0 in clear text,
// are problem+json with a documented code, like every other error, and
// have no HTML escaping.
func TestGoRefusalsAreProblems(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ProblemListener(ln))
	defer srv.Close()
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		raw    string
		status int
		code   string
	}{
		{"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nExpect: <fancy>\r\nContent-Length: 2\r\n\r\n{}", 417, "expectation_failed"},
		{"POST /v1/tokens HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, "unsupported_transfer_encoding"},
		{"GET /v1/tokens HTTP/2.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported"},
	} {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(tc.raw)); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.code, err)
		}
		var p Problem
		err = json.NewDecoder(resp.Body).Decode(&p)
		c.Close()
		if resp.StatusCode != tc.status || resp.Header.Get("Content-Type") != "application/problem+json" || err != nil || p.Code != tc.code || p.Status != tc.status {
			t.Errorf("%q = %d %s %+v %v; want %d problem %s", tc.raw, resp.StatusCode, resp.Header.Get("Content-Type"), p, err, tc.status, tc.code)
		}
		if doc, ok := problems[tc.code]; !ok || doc.Status != tc.status {
			t.Errorf("code %s not documented with status %d in the OpenAPI document", tc.code, tc.status)
		}
	}
}

// TestProblemsAreNotHTMLEscaped: a problem's detail says <key> as <key>,
// not \u003ckey\u003e.
func TestProblemsAreNotHTMLEscaped(t *testing.T) {
	b, err := marshalPlain(Problem{Status: 400, Code: "invalid_request", Detail: "want <key> & more"})
	if err != nil || !strings.Contains(string(b), `"want <key> & more"`) {
		t.Fatalf("%s %v", b, err)
	}
	out, _ := rewriteGoError([]byte("HTTP/1.1 400 Bad Request" + goErrorHeaders + "400 Bad Request: <x>"))
	if strings.Contains(string(out), `\u003c`) {
		t.Fatalf("%s", out)
	}
}

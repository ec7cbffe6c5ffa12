package httpapi_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/openapi"
)

// TestOpenAPIServed checks GET /openapi.json answers the document, in JSON.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	res := a.get("", "/openapi.json")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if res.status != http.StatusOK || json.Unmarshal(res.body, &doc) != nil || doc.OpenAPI != "3.1.0" || doc.Paths["/v1/tokens"] == nil {
		t.Fatalf("GET /openapi.json = %d %.200s", res.status, res.body)
	}
}

// TestProblemTypesResolve checks that a problem's type is a page of this
// server, and that each documented code's page says what happened and what
// to do next.
func TestProblemTypesResolve(t *testing.T) {
	t.Parallel()
	a := newAPI(t)
	p := wantProblem(t, a.get(a.client(), "/v1/tokens/tok_missing"), http.StatusNotFound, "token_not_found")
	if p.Type != "/problems/token_not_found" {
		t.Errorf("type = %q, want /problems/token_not_found", p.Type)
	}
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	for code := range problems {
		res := a.get("", "/problems/"+code)
		page := string(res.body)
		if res.status != http.StatusOK || !strings.HasPrefix(res.header.Get("Content-Type"), "text/html") ||
			!strings.Contains(page, code) || !strings.Contains(page, "What to do next") {
			t.Errorf("GET /problems/%s = %d %s", code, res.status, page)
		}
	}
	wantProblem(t, a.get("", "/problems/no_such_code"), http.StatusNotFound, "not_found")
}

package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/intent"
	"github.com/tokend/tokend/openapi"
)

// TestEveryProblemCodeIsDocumented checks that each code this package can
// answer with is in the OpenAPI document, with the same status there.
func TestEveryProblemCodeIsDocumented(t *testing.T) {
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	var all []Problem
	for _, m := range mappings {
		all = append(all, Problem{Status: m.status, Code: m.code})
	}
	for _, p := range []*Problem{errNoRoute, errNoMethod, errForbidden, errRateLimited, errIdempotencyKeyMissing, errOperationNotFound, unsupportedMediaType("x")} {
		all = append(all, *p)
	}
	for _, raw := range []string{"HTTP/1.1 431 Request Header Fields Too Large" + goErrorHeaders + "431 Request Header Fields Too Large", "HTTP/1.1 400 Bad Request" + goErrorHeaders + "400 Bad Request"} {
		out, ok := rewriteGoError([]byte(raw))
		if !ok {
			t.Fatalf("%q not rewritten", raw)
		}
		_, body, _ := strings.Cut(string(out), "\r\n\r\n")
		var p Problem
		if err := json.Unmarshal([]byte(body), &p); err != nil {
			t.Fatal(err)
		}
		all = append(all, p)
	}
	for _, err := range []error{
		&http.MaxBytesError{Limit: 1},
		&consume.InProgressError{},
		intent.ErrOperationChanging,
		context.Canceled,
		errors.New("a bug"),
	} {
		all = append(all, problemFor(err))
	}
	for _, p := range all {
		doc, ok := problems[p.Code]
		switch {
		case !ok:
			t.Errorf("code %s is not in the OpenAPI document's x-problems", p.Code)
		case doc.Status != p.Status && !(p.Code == "unknown_operation" && p.Status == http.StatusNotFound):
			// unknown_operation is a 404 where the operation is the resource.
			t.Errorf("code %s: status %d, the document says %d", p.Code, p.Status, doc.Status)
		}
	}
}

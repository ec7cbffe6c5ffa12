package httpapi

import (
	"context"
	"errors"
	"net/http"
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
	for _, p := range []*Problem{errNoRoute, errNoMethod, errForbidden, errRateLimited, errIdempotencyKeyMissing, errOperationNotFound} {
		all = append(all, *p)
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

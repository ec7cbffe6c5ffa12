package openapi_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/tokend/tokend/openapi"
)

// TestDocumentIsValid loads the document as an OpenAPI 3.1 validator does
// and checks it, and checks that every problem code of the ProblemCode enum
// has its page and no page lacks its code.
func TestDocumentIsValid(t *testing.T) {
	j, err := openapi.JSON()
	if err != nil {
		t.Fatal(err)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(j)
	if err != nil {
		t.Fatal(err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %q, want 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatal(err)
	}
	problems, err := openapi.Problems()
	if err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["ProblemCode"].Value.Enum {
		enum = append(enum, v.(string))
	}
	slices.Sort(enum)
	if pages := slices.Sorted(maps.Keys(problems)); !slices.Equal(enum, pages) {
		t.Errorf("ProblemCode enum %v\nx-problems       %v", enum, pages)
	}
	for c, p := range problems {
		if p.Status < 400 || p.Title == "" || p.Happened == "" || p.Next == "" {
			t.Errorf("x-problems %s = %+v: want a status, title, happened and next", c, p)
		}
	}
}

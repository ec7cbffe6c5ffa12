// Package contract checks HTTP exchanges against tokend's OpenAPI document,
// for tests: Handler wraps a server so that every request a test sends and
// every answer it gets are validated, and a mismatch fails the test.
package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/tokend/tokend/openapi"
)

var load = sync.OnceValues(func() (*spec, error) {
	// The problem pages: checked as text, like text/plain.
	openapi3filter.RegisterBodyDecoder("text/html", openapi3filter.PlainBodyDecoder)
	j, err := openapi.JSON()
	if err != nil {
		return nil, err
	}
	doc, err := openapi3.NewLoader().LoadFromData(j)
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, err
	}
	r, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	return &spec{doc: doc, router: r}, nil
})

type spec struct {
	doc    *openapi3.T
	router routers.Router
}

// transport are the headers of HTTP itself, which the document does not
// declare; any other header of an answer must be declared for its status.
var transport = []string{"Content-Type", "Content-Length", "Date"}

// Option adjusts a Handler.
type Option func(*checker)

// SkipUndeclaredRoutes lets requests to routes the document does not
// declare through unchecked: routes a test mounted on the server itself.
// Without it such a request must get a 404 or 405 problem.
func SkipUndeclaredRoutes() Option { return func(c *checker) { c.skipUndeclared = true } }

type checker struct {
	t              testing.TB
	next           http.Handler
	spec           *spec
	skipUndeclared bool
}

// Handler returns next, checking every exchange against the document: the
// request (its parameters, headers and body), the answer's status, its
// headers and its body. A request the document refuses must be refused
// with a 4xx; an answer with a status, header or body field the document
// does not declare for the route fails t.
func Handler(t testing.TB, next http.Handler, opts ...Option) http.Handler {
	s, err := load()
	if err != nil {
		t.Fatalf("contract: load the OpenAPI document: %v", err)
	}
	c := &checker{t: t, next: next, spec: s}
	for _, o := range opts {
		o(c)
	}
	return c
}

func (c *checker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
	}
	reset := func() {
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	reset()
	// Validation reads the request; the server gets a copy of its own.
	vr := r.Clone(r.Context())
	reset()
	rec := httptest.NewRecorder()
	c.next.ServeHTTP(rec, r)
	res := rec.Result()
	resBody := rec.Body.Bytes()
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(resBody)

	vr.Body = io.NopCloser(bytes.NewReader(body))
	if len(body) > 0 && len(vr.Header.Values("Content-Type")) == 0 {
		// tokend reads a body sent without Content-Type as JSON; any other
		// type is refused (415), which the document must declare.
		vr.Header.Set("Content-Type", "application/json")
	}
	if err := c.check(vr, res, resBody); err != nil {
		c.t.Errorf("contract: %s %s → %d: %v\nrequest body: %.500s\nanswer: %.1000s", r.Method, r.URL.RequestURI(), res.StatusCode, err, body, resBody)
	}
}

func (c *checker) check(r *http.Request, res *http.Response, body []byte) error {
	route, params, err := c.spec.router.FindRoute(r)
	if err != nil {
		if c.skipUndeclared {
			return nil
		}
		// Not a route of the API: the answer must say so.
		if res.StatusCode != http.StatusNotFound && res.StatusCode != http.StatusMethodNotAllowed {
			return fmt.Errorf("the document declares no such route (%v), yet the answer is not a 404 or 405", err)
		}
		return c.problem(body)
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    r,
		PathParams: params,
		Route:      route,
		Options: &openapi3filter.Options{
			MultiError:         true,
			AuthenticationFunc: bearer,
		},
	}
	reqErr := openapi3filter.ValidateRequest(r.Context(), in)
	if reqErr != nil && res.StatusCode/100 != 4 {
		return fmt.Errorf("the document refuses the request (%v), yet the answer is not a 4xx", reqErr)
	}
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 res.StatusCode,
		Header:                 res.Header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(r.Context(), out); err != nil {
		return err
	}
	return undeclaredHeaders(route.Operation, res)
}

// undeclaredHeaders fails an answer that carries a header its status does
// not declare.
func undeclaredHeaders(op *openapi3.Operation, res *http.Response) error {
	ref := op.Responses.Status(res.StatusCode)
	if ref == nil {
		ref = op.Responses.Default()
	}
	if ref == nil || ref.Value == nil {
		return errors.New("no response declared")
	}
	var extra []string
	for name := range res.Header {
		declared := slices.ContainsFunc(transport, func(h string) bool { return strings.EqualFold(h, name) })
		for h := range ref.Value.Headers {
			declared = declared || strings.EqualFold(h, name)
		}
		if !declared {
			extra = append(extra, name)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		return fmt.Errorf("headers %v are not declared for status %d", extra, res.StatusCode)
	}
	return nil
}

// problem checks body against the Problem schema.
func (c *checker) problem(body []byte) error {
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("the answer is not JSON: %w", err)
	}
	return c.spec.doc.Components.Schemas["Problem"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020())
}

// bearer accepts a request that presents a bearer credential; whether it
// is a valid key is the server's to say.
func bearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, cred, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return errors.New("no bearer credential")
	}
	return nil
}

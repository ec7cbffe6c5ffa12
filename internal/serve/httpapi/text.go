package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/token"
)

// Every string a request carries into tokend must be text Postgres can store
// (token.ValidText: valid UTF-8 without NUL). It is checked where strings
// enter, once for every route: requireText checks the path parameters, the
// query, the headers the API reads and urlencoded form bodies; Decode
// checks JSON bodies (internal/serve/reqbody). A refusal is 400 invalid_request
// and changes nothing.

// textHeaders are the request headers whose values reach the database.
// (Authorization is only hashed; X-Request-Id is replaced unless well-formed.)
var textHeaders = []string{idempotencyKeyHeader}

// requireText refuses a request whose path parameters, query string, read
// headers or form body are not text, and a query string that does not parse:
// gin's own query accessors drop what does not parse, which would silently
// widen a filter.
func requireText(c *gin.Context) {
	if err := checkRequestText(c); err != nil {
		Abort(c, err)
		return
	}
	c.Next()
}

func checkRequestText(c *gin.Context) error {
	for _, p := range c.Params {
		if !token.ValidText(p.Value) {
			return notTextProblem("path parameter "+strconv.Quote(p.Key), p.Value)
		}
	}
	q, err := url.ParseQuery(c.Request.URL.RawQuery)
	if err != nil {
		return invalidRequest("the query string does not parse: " + queryErrorDetail(err))
	}
	if err := checkValues("query parameter", q); err != nil {
		return err
	}
	for _, h := range textHeaders {
		for _, v := range c.Request.Header.Values(h) {
			if !token.ValidText(v) {
				return notTextProblem("header "+h, v)
			}
		}
	}
	if c.ContentType() == "application/x-www-form-urlencoded" {
		return checkFormText(c)
	}
	return nil
}

// checkFormText checks the fields of a form body (the pages' forms) and puts
// the body back for the handler. A form that does not parse is the handler's
// to refuse; some clients label JSON bodies as forms (curl -d), and the API
// decodes those as JSON, so only the fields that parse are checked.
func checkFormText(c *gin.Context) error {
	body, err := io.ReadAll(c.Request.Body) // bounded by limitBody
	if err != nil {
		return err // 413 past the limit; else the client went away
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(body))
	vs, _ := url.ParseQuery(string(body))
	return checkValues("form field", vs)
}

func checkValues(what string, vs url.Values) error {
	for k, list := range vs {
		if !token.ValidText(k) {
			return notTextProblem(what+" name", k)
		}
		for _, v := range list {
			if !token.ValidText(v) {
				return notTextProblem(what+" "+strconv.Quote(k), v)
			}
		}
	}
	return nil
}

// queryErrorDetail words url.ParseQuery's error without echoing the raw
// query, which may hold anything.
func queryErrorDetail(err error) string {
	var e url.EscapeError
	if errors.As(err, &e) {
		return fmt.Sprintf("invalid percent-escape %q", string(e))
	}
	return err.Error()
}

func notTextProblem(what, value string) *Problem {
	return invalidRequest(token.CheckText(what, value).Error())
}

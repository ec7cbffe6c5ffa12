package httpapi

import (
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// Headers that tokend reads one way: a request that gives one of them twice
// could be read one way here and another way by a proxy or gateway in front
// (one checks the first Authorization, the other the last), so it is
// refused, 400 invalid_request, before anything reads it.
var singleHeaders = []string{"Authorization", idempotencyKeyHeader, "Content-Type", "Content-Encoding"}

// unsupportedMediaType is a 415 problem saying detail.
func unsupportedMediaType(detail string) *Problem {
	return &Problem{Status: http.StatusUnsupportedMediaType, Code: "unsupported_media_type", Title: "Unsupported media type", Detail: detail}
}

// checkOneReading refuses a request that repeats a header of singleHeaders,
// or whose body is encoded (Content-Encoding other than identity): tokend
// decodes no encoding, and reading an encoded body as it is would be a
// second reading of it.
func checkOneReading(h http.Header) error {
	for _, name := range singleHeaders {
		if n := len(h.Values(name)); n > 1 {
			return invalidRequest(fmt.Sprintf("the %s header is given %d times; send it once", name, n))
		}
	}
	for coding := range strings.SplitSeq(h.Get("Content-Encoding"), ",") {
		if c := strings.TrimSpace(coding); c != "" && !strings.EqualFold(c, "identity") {
			return unsupportedMediaType("Content-Encoding " + quoteHeader(c) + " is not supported; send the body unencoded (identity)")
		}
	}
	return nil
}

// checkJSONType refuses, 415, a JSON route's request whose Content-Type is
// not application/json (a charset parameter, if any, must be utf-8). A
// request without Content-Type is read as JSON: the API's clients, curl
// examples and tests have sent none, and such a body has no other reading.
func checkJSONType(h http.Header) error {
	ct := strings.TrimSpace(h.Get("Content-Type"))
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return unsupportedMediaType("the Content-Type does not parse; send application/json")
	}
	if mt != "application/json" {
		return unsupportedMediaType("Content-Type " + quoteHeader(mt) + " is not accepted here; send application/json")
	}
	for k, v := range params {
		if k != "charset" || !strings.EqualFold(v, "utf-8") {
			return unsupportedMediaType("Content-Type application/json takes no parameter but charset=utf-8")
		}
	}
	return nil
}

// quoteHeader quotes a header value for a detail, cut short: it is the
// client's own text, echoed back to it only.
func quoteHeader(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return fmt.Sprintf("%q", s)
}

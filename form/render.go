package form

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
)

// RenderParam is the query parameter that names a rendering of a form page.
//
// Each rendering is an intent of its own. Its name is in the page's URL, so
// that the browser keeps each rendering apart (two tabs are two URLs, two
// copies in its cache) and so that fetching the URL again issues the same
// token again: intent IDs make issuance idempotent.
const RenderParam = "render"

// renderLen is the length of a rendering's name: 128 random bits.
const renderLen = 22

// newRender names a new rendering.
func newRender() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails, see crypto/rand.Read
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// renderOf returns the rendering a GET request names, if it names one.
func renderOf(r *http.Request) (string, bool) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return "", false
	}
	v := r.URL.Query().Get(RenderParam)
	b, err := base64.RawURLEncoding.Strict().DecodeString(v)
	return v, err == nil && len(v) == renderLen && len(b) == 16
}

// intentID is the intent ID of subject's rendering render. A rendering's
// name can be copied from one user's URL to another's; the subject in the
// intent ID keeps their intents apart.
func intentID(subject, render string) string {
	sum := sha256.Sum256([]byte("tokend form v1\x00" + subject + "\x00" + render))
	return "form-" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// withNewRender returns the URL of r with a new rendering named in it.
func withNewRender(r *http.Request) string {
	q := r.URL.Query()
	q.Set(RenderParam, newRender())
	u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
	return u.String()
}

package httpapi

import (
	"bytes"
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/jsonread"
)

// Decode reads c's request body, one JSON object, into dst, the way every
// JSON tokend reads is read (internal/jsonread): member names match
// case-sensitively, and duplicate members at any depth, invalid UTF-8, lone
// surrogates, unknown fields, trailing data and values of the wrong type are
// errors that name the member, and its strings must be text Postgres can
// store (no NUL). Abort answers them 400 invalid_request, or
// 413 past Config.MaxBodyBytes.
func Decode(c *gin.Context, dst any) error {
	// The body is bounded by limitBody, so it is read whole: the decoder
	// does so anyway, and the first byte tells an object from the rest.
	body, err := io.ReadAll(c.Request.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return invalidRequest("the request body could not be read")
	}
	if err := checkJSONText(body); err != nil {
		return err
	}
	if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return invalidRequest("the request body must be a JSON object")
	}
	if err := jsonread.Unmarshal(body, dst); err != nil {
		var refused *jsonread.Error
		if errors.As(err, &refused) {
			return invalidRequest(refused.Error())
		}
		return err // a bug, such as a non-pointer dst
	}
	return nil
}

func invalidRequest(detail string) *Problem {
	return &Problem{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request", Detail: detail}
}

// payload is a request's business payload, kept as sent. Decoding refuses a
// payload jsonread.CheckPayload refuses, bound by a digest or not, so that a
// number the digest would read as another is refused at issue and at spend.
type payload []byte

// UnmarshalJSON keeps b once it passes jsonread.CheckPayload.
func (p *payload) UnmarshalJSON(b []byte) error {
	if err := jsonread.CheckPayload(b); err != nil {
		return err
	}
	*p = append((*p)[:0], b...)
	return nil
}

// rawPayload returns a request's optional raw JSON member, nil when it is
// absent or null: a null payload binds nothing, like an absent one.
func rawPayload(m []byte) []byte {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return m
}

// InvalidRequest is a 400 invalid_request problem saying detail, for the
// handlers of mounted routes to pass to Abort.
func InvalidRequest(detail string) error { return invalidRequest(detail) }

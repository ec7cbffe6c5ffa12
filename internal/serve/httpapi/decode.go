package httpapi

import (
	"errors"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/serve/reqbody"
)

// Decode reads c's request body, one JSON object, into dst, the way every
// JSON tokend reads is read (internal/serve/reqbody): member names match
// case-sensitively, and duplicate members at any depth, invalid UTF-8, lone
// surrogates, unknown fields, trailing data and values of the wrong type are
// errors that name the member, and its strings must be text Postgres can
// store (no NUL). Abort answers them 400 invalid_request, or
// 413 past Config.MaxBodyBytes.
//
// A Content-Type other than application/json is 415 unsupported_media_type
// before the body is read; none at all is read as JSON (checkJSONType).
func Decode(c *gin.Context, dst any) error {
	if err := checkJSONType(c.Request.Header); err != nil {
		return err
	}
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
	err = reqbody.Decode(body, dst)
	var refused *reqbody.Error
	if errors.As(err, &refused) {
		return invalidRequest(refused.Detail)
	}
	return err // nil, or a bug such as a non-pointer dst
}

func invalidRequest(detail string) *Problem {
	return &Problem{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request", Detail: detail}
}

// InvalidRequest is a 400 invalid_request problem saying detail, for the
// handlers of mounted routes to pass to Abort.
func InvalidRequest(detail string) error { return invalidRequest(detail) }

package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"github.com/gin-gonic/gin"
)

// Decode reads c's request body, one JSON object, into dst. It is strict:
// unknown fields, trailing data and values of the wrong type are errors that
// name the field. Its strings must be text Postgres can store (valid UTF-8,
// no NUL). Abort answers them 400, or 413 past Config.MaxBodyBytes.
func Decode(c *gin.Context, dst any) error {
	body, err := io.ReadAll(c.Request.Body) // bounded by Config.MaxBodyBytes
	if err != nil {
		return decodeError(err)
	}
	if err := checkJSONText(body); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return invalidRequest("unexpected data after the JSON object")
	}
	return nil
}

func decodeError(err error) error {
	var (
		tooLarge  *http.MaxBytesError
		syntax    *json.SyntaxError
		wrongType *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return err
	case errors.Is(err, io.EOF):
		return invalidRequest("the request body must be a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidRequest("the JSON body ends early")
	case errors.As(err, &syntax):
		return invalidRequest(fmt.Sprintf("malformed JSON at byte %d: %s", syntax.Offset, strings.TrimPrefix(syntax.Error(), "json: ")))
	case errors.As(err, &wrongType):
		if wrongType.Field == "" {
			return invalidRequest("the request body must be a JSON object")
		}
		return invalidRequest(fmt.Sprintf("field %q must be %s, not %s", wrongType.Field, jsonKind(wrongType.Type), wrongType.Value))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// encoding/json has no type for it.
		return invalidRequest(strings.TrimPrefix(err.Error(), "json: "))
	}
	return err // a bug, such as a non-pointer dst
}

func invalidRequest(detail string) *Problem {
	return &Problem{Status: http.StatusBadRequest, Code: "invalid_request", Title: "Invalid request", Detail: detail}
}

// jsonKind names what a field of Go type t holds, in JSON's words.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	}
	return "an object"
}

// rawPayload returns a request's optional raw JSON member, nil when it is
// absent or null: a null payload binds nothing, like an absent one.
func rawPayload(m json.RawMessage) []byte {
	if len(m) == 0 || bytes.Equal(m, []byte("null")) {
		return nil
	}
	return m
}

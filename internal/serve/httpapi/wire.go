package httpapi

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/gin-gonic/gin"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// tokend's answers are the client package's types: each JSON shape of the
// API is declared once, there, and what tokend sends is what the client
// reads (the contract test checks both against the OpenAPI document).

// timeFormat is RFC 3339 in UTC with the database's microseconds, always
// six digits, so that a time renders the same way on every replay.
const timeFormat = "2006-01-02T15:04:05.000000Z07:00"

// wireOptions encode an answer with encoding/json's rules, except times,
// which are written in timeFormat, and <, > and & written as themselves:
// an answer is JSON, never HTML, and escaping them would only grow it.
var wireOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsontext.EscapeForHTML(false),
	jsonv2.WithMarshalers(jsonv2.MarshalFunc(func(t time.Time) ([]byte, error) {
		return []byte(`"` + t.UTC().Format(timeFormat) + `"`), nil
	})),
)

// marshalPlain is json.Marshal without HTML escaping, for bodies built
// outside WriteJSON (problems).
func marshalPlain(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// WriteJSON answers with v, one of the client package's types, as JSON:
// the handlers of mounted routes answer with it too. A pointer to the value
// encodes the same and saves the encoder a copy of it (reflect.New).
func WriteJSON(c *gin.Context, status int, v any) {
	body, err := jsonv2.Marshal(v, wireOptions)
	if err != nil {
		Abort(c, err)
		return
	}
	c.Data(status, "application/json", body)
}

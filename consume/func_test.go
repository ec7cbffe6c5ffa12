package consume_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/consume"
	"github.com/tokend/tokend/operation"
)

type transfer struct {
	To     string `json:"to"`
	Amount int    `json:"amount"`
}

func (t transfer) Validate() error {
	if t.Amount <= 0 {
		return &consume.PayloadError{Field: "amount", Rule: "must be positive"}
	}
	return nil
}

// A typed handler reads its payload with tokend's one strict reading and
// refuses, with a *PayloadError, what that reading or the input's Validate
// refuses, before its function runs; RegisterFunc declares the operation in
// the same call, so it is runnable once declared.
func TestFunc(t *testing.T) {
	t.Parallel()
	ran := 0
	r := consume.NewRegistry()
	consume.RegisterFunc(r, operation.Policy{Name: "bank.transfer"}, func(ctx context.Context, tx pgx.Tx, c consume.Call, in transfer) (consume.Outcome, error) {
		ran++
		return consume.Outcome{Status: 200, Result: in}, nil
	})
	if p, ok := r.Builtin("bank.transfer"); !ok || p.Mode != operation.Atomic || !r.Has("bank.transfer") {
		t.Fatalf("RegisterFunc: builtin %v %v, has %v; want declared atomic with a handler", p, ok, r.Has("bank.transfer"))
	}
	h, _ := r.Lookup("bank.transfer")
	tests := []struct {
		name, payload, field string
	}{
		{"malformed", `{"to":`, ""},
		{"duplicate member", `{"to":"a","to":"b","amount":1}`, ""},
		{"unknown member", `{"to":"a","amount":1,"memo":"x"}`, ""},
		{"member in another case", `{"To":"a","amount":1}`, ""},
		{"wrong type", `{"to":"a","amount":"1"}`, ""},
		{"refused by Validate", `{"to":"a","amount":0}`, "amount"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, err := range []error{
				r.Validate("bank.transfer", []byte(tc.payload)),
				func() error {
					_, err := h.Execute(context.Background(), nil, consume.Call{Payload: []byte(tc.payload)})
					return err
				}(),
			} {
				var pe *consume.PayloadError
				if !errors.As(err, &pe) || pe.Field != tc.field || pe.Rule == "" || !errors.Is(err, consume.ErrInvalidPayload) {
					t.Errorf("%s: err = %v, want a *PayloadError on %q", tc.payload, err, tc.field)
				}
			}
		})
	}
	if ran != 0 {
		t.Fatalf("the function ran %d times on refused payloads", ran)
	}
	out, err := h.Execute(context.Background(), nil, consume.Call{Payload: []byte(`{"to":"a","amount":5}`)})
	if err != nil || ran != 1 || out.Result != (transfer{To: "a", Amount: 5}) {
		t.Fatalf("Execute = %v, %v after %d runs; want the decoded input, once", out, err, ran)
	}
}

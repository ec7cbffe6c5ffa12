package token_test

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/tokend/tokend/token"
)

func ExampleDigest() {
	// The same credit, spelled two ways and sent with different trace ids.
	a := []byte(`{"account":"acc_1","amount":100,"trace_id":"t-1"}`)
	b := []byte(`{ "amount": 1e2, "trace_id": "t-2", "account": "acc_1" }`)
	ignored := []string{"trace_id"}

	da, _ := token.Digest(a, ignored)
	db, _ := token.Digest(b, ignored)
	canon, _ := token.Canonical(b, ignored)
	fmt.Printf("%s\n%x\n%v\n", canon, da, bytes.Equal(da, db))

	_, err := token.Digest([]byte(`{"amount":1,"amount":2}`), nil)
	fmt.Println(errors.Is(err, token.ErrInvalidPayload))
	// Output:
	// {"account":"acc_1","amount":100}
	// 1dae9ac28e78b11768ff6d89da343df993a78322adeaa4a05ea3847302bc4671
	// true
	// true
}

func ExampleNext() {
	// A lease-mode spend whose holder lost track of the outcome, reconciled
	// by an operator who found the effect never happened.
	s := token.Issued
	for _, a := range []token.Action{token.Lease, token.ReportUnknown, token.ReconcileNotExecuted} {
		next, err := token.Next(s, a)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s --%s--> %s (new generation: %v)\n", s, a, next, a.BumpsGeneration())
		s = next
	}

	_, err := token.Next(token.Consumed, token.Spend)
	fmt.Println(err, errors.Is(err, token.ErrInvalidTransition))
	// Output:
	// issued --lease--> pending (new generation: true)
	// pending --report_unknown--> unknown (new generation: false)
	// unknown --reconcile_not_executed--> issued (new generation: true)
	// token: invalid transition: spend from consumed true
}

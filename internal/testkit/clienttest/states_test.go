package clienttest_test

import (
	"slices"
	"testing"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/token"
)

// TestStatesAreTokends: the client spells out the token states itself, so
// that it imports nothing of tokend's; they are exactly tokend's.
func TestStatesAreTokends(t *testing.T) {
	mine := []client.State{client.Issued, client.Pending, client.Consumed, client.Failed, client.Unknown, client.Revoked, client.Expired}
	var want []string
	for _, s := range token.States {
		want = append(want, string(s))
	}
	var got []string
	for _, s := range mine {
		got = append(got, string(s))
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("client states %v, tokend's %v", got, want)
	}
}

package demo

import (
	"encoding/json"
	"errors"
	"net/url"
	"strconv"
	"strings"

	"github.com/tokend/tokend/internal/ledger"
)

// Why a top-up's values were refused; the form page words them for people.
var (
	errAccount = errors.New("demo: account is not a ledger account name")
	errAmount  = errors.New("demo: amount is not a whole number in range")
)

// creditPayload turns the top-up form's fields into ledger.credit's payload.
// The amount is typed as text, and the ledger takes an integer.
func creditPayload(fields url.Values) ([]byte, error) {
	account := strings.TrimSpace(fields.Get("account"))
	if !ledger.ValidAccount(account) {
		return nil, errAccount
	}
	amount, err := strconv.ParseInt(strings.TrimSpace(fields.Get("amount")), 10, 64)
	if err != nil || amount < 1 || amount > ledger.MaxAmount {
		return nil, errAmount
	}
	return json.Marshal(ledger.Payload{Account: account, Amount: amount})
}

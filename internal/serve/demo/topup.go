package demo

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/example/ledger"
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

// ownAccount confines a top-up to the signed-in visitor's own account: the
// account is the visitor's name. The form has no account field; a submit
// that names another account was not made with it, and is refused.
func (a *App) ownAccount(c *gin.Context) {
	if err := c.Request.ParseForm(); err != nil {
		c.String(http.StatusBadRequest, "This form could not be read.")
		c.Abort()
		return
	}
	user := userOf(c.Request)
	if acc, ok := c.Request.PostForm["account"]; ok && (len(acc) != 1 || strings.TrimSpace(acc[0]) != user) {
		c.String(http.StatusForbidden, "You can top up only your own account.")
		c.Abort()
		return
	}
	c.Request.PostForm.Set("account", user)
}

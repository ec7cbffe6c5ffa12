package httpapi

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/tokend/tokend/internal/ledger"
)

func (s *Server) getAccount(c *gin.Context) {
	account := c.Param("account")
	if !ledger.ValidAccount(account) {
		Abort(c, invalidRequest("account must be 1 to 64 of A-Z a-z 0-9 _ . : @ -"))
		return
	}
	balance, err := ledger.Balance(c.Request.Context(), s.pool, Caller(c).Tenant, account)
	if err != nil {
		Abort(c, err)
		return
	}
	writeJSON(c, http.StatusOK, ledger.Account{Account: account, Balance: balance})
}

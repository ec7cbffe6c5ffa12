// Package ledgerapi serves the example ledger's one read over tokend's REST
// API: GET /v1/ledger/accounts/{account}, a balance of the caller's tenant.
// It joins the API through httpapi.Config.Mounts, as any route kept outside
// httpapi does, so the API's own packages know nothing of the ledger.
package ledgerapi

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/client"
	"github.com/tokend/tokend/example/ledger"
	"github.com/tokend/tokend/internal/serve/httpapi"
)

// Mount returns the ledger's route, reading balances from pool.
func Mount(pool *pgxpool.Pool) httpapi.Mount {
	return func(r httpapi.Routes) {
		r.Client.GET("/ledger/accounts/:account", func(c *gin.Context) {
			account := c.Param("account")
			if !ledger.ValidAccount(account) {
				httpapi.Abort(c, httpapi.InvalidRequest("account must be 1 to 64 of A-Z a-z 0-9 _ . : @ -"))
				return
			}
			balance, err := ledger.Balance(c.Request.Context(), pool, httpapi.Caller(c).Tenant, account)
			if err != nil {
				httpapi.Abort(c, err)
				return
			}
			httpapi.WriteJSON(c, http.StatusOK, client.Account{Account: account, Balance: balance})
		})
	}
}

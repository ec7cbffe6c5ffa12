package webhook_test

import (
	"errors"
	"log"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/webhook"
)

// A consumer of tokend's webhooks: verify, then apply the effect once per
// event, in the same transaction that records the event id.
func Example() {
	var pool *pgxpool.Pool // the consumer's own database, with webhook.Schema applied
	secret := "whsec_…"    // shown once when the endpoint was registered

	http.HandleFunc("/tokend-events", func(w http.ResponseWriter, r *http.Request) {
		d, err := webhook.Receive(secret, r)
		if err != nil {
			http.Error(w, "not a tokend delivery", http.StatusBadRequest)
			return
		}
		err = pgx.BeginFunc(r.Context(), pool, func(tx pgx.Tx) error {
			first, err := webhook.OnceTx(r.Context(), tx, d.Data.ID)
			if err != nil || !first {
				return err // a second delivery: already applied
			}
			if d.Type == "token.spend" {
				_, err = tx.Exec(r.Context(), `UPDATE orders SET paid = true WHERE token_id = $1`, d.Data.TokenID)
			}
			return err
		})
		if err != nil {
			// Any non-2xx answer makes tokend deliver again later.
			log.Print(errors.Join(errors.New("apply a tokend event"), err))
			http.Error(w, "try again", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}

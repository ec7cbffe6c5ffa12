package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/tokendtest"
	"github.com/tokend/tokend/webhook"
)

// A consumer of tokend's webhooks: verify, then apply the effect once per
// event, in the same transaction that records the event id. tokend
// delivers an event again until it is answered 2xx, so the consumer sees
// some twice; here the same delivery arrives twice and pays the order once.
func Example() {
	ctx := context.Background()
	// The consumer's own database, with webhook.Schema applied; here one of
	// the example's own.
	kit, cleanup := tokendtest.ForExample(nil)
	defer cleanup()
	pool := kit.Pool
	if _, err := pool.Exec(ctx, webhook.Schema); err != nil {
		log.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		CREATE TABLE orders (token_id text PRIMARY KEY, paid int NOT NULL DEFAULT 0);
		INSERT INTO orders (token_id) VALUES ('tok_1')`); err != nil {
		log.Fatal(err)
	}
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw" // shown once when the endpoint was registered

	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokend-events", func(w http.ResponseWriter, r *http.Request) {
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
				_, err = tx.Exec(r.Context(), `UPDATE orders SET paid = paid + 1 WHERE token_id = $1`, d.Data.TokenID)
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
	srv := httptest.NewServer(mux)
	defer srv.Close()

	// What tokend sends: the event, signed under the endpoint's secret.
	body, err := json.Marshal(webhook.Delivery{Type: "token.spend", Timestamp: time.Now(),
		Data: webhook.Event{ID: "evt_1", Type: "spend", TokenID: "tok_1", Operation: "checkout.submit", Subject: "user-42", To: "consumed"}})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		h, err := webhook.Sign(secret, "evt_1", time.Now(), body)
		if err != nil {
			log.Fatal(err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/tokend-events", bytes.NewReader(body))
		if err != nil {
			log.Fatal(err)
		}
		req.Header = h
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode)
	}
	var paid int
	if err := pool.QueryRow(ctx, `SELECT paid FROM orders WHERE token_id = 'tok_1'`).Scan(&paid); err != nil {
		log.Fatal(err)
	}
	fmt.Println("paid", paid, "time(s)")
	// Output:
	// 204
	// 204
	// paid 1 time(s)
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/tokend/tokend/internal/testkit/ledgertest"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tokend/tokend/internal/testkit/proctest"
)

// Two tokend processes on one database, 100 concurrent spends of one token
// spread over both: the database decides, so the ledger moves once.
func TestTwoProcessesSpendOneTokenOnce(t *testing.T) {
	t.Parallel()
	dbURL := ledgertest.NewURL(t)
	a := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})
	b := proctest.Start(t, proctest.Options{DatabaseURL: dbURL})
	key := proctest.CreateKey(t, dbURL, "acme", "client")

	payload := `{"account":"alice","amount":5}`
	status, body := call(t, a.URL, key, http.MethodPost, "/v1/tokens",
		`{"operation":"ledger.credit","subject":"alice","ttl_seconds":600,"payload":`+payload+`}`, "Idempotency-Key", "multi-1")
	if status != http.StatusCreated {
		t.Fatalf("issue: %d %s", status, body)
	}
	var issued struct{ Token string }
	if err := json.Unmarshal(body, &issued); err != nil {
		t.Fatal(err)
	}
	spend := fmt.Sprintf(`{"token":%q,"operation":"ledger.credit","subject":"alice","payload":%s}`, issued.Token, payload)

	const n = 100
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		counts = map[string]int{}
		bodies = map[string]bool{}
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			url := a.URL
			if i%2 == 1 {
				url = b.URL
			}
			status, body, replayed := callReplay(t, url, key, "/v1/tokens/consume", spend)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case status == http.StatusOK && replayed:
				counts["replayed"]++
				bodies[string(body)] = true
			case status == http.StatusOK:
				counts["executed"]++
				bodies[string(body)] = true
			case status == http.StatusConflict:
				counts["in_progress"]++
			default:
				t.Errorf("spend: %d %s", status, body)
			}
		}()
	}
	wg.Wait()
	t.Logf("outcomes: %v", counts)
	if counts["executed"] != 1 || len(bodies) != 1 {
		t.Fatalf("executed %d times with %d distinct bodies, want 1 and 1", counts["executed"], len(bodies))
	}

	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var balance, entries int64
	if err := conn.QueryRow(context.Background(),
		`SELECT (SELECT balance FROM ledger_accounts WHERE account = 'alice'), (SELECT count(*) FROM ledger_entries)`).Scan(&balance, &entries); err != nil {
		t.Fatal(err)
	}
	if balance != 5 || entries != 1 {
		t.Fatalf("balance %d with %d entries, want 5 and 1", balance, entries)
	}
}

func call(t *testing.T, base, key, method, path, body string, headers ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

func callReplay(t *testing.T, base, key, path, body string) (int, []byte, bool) {
	req, err := http.NewRequest(http.MethodPost, base+path, bytes.NewBufferString(body))
	if err != nil {
		t.Error(err)
		return 0, nil, false
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0, nil, false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header.Get("Idempotent-Replayed") == "true"
}

package httpapi_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/tokend/tokend/internal/testkit/redistest"
)

// heapBound is what the README and SECURITY.md state: reading many tokens
// with large stored outcomes through GET /v1/tokens/{id} grows the live
// heap of an instance by less than this, whatever the outcomes weigh.
const heapBound = 16 << 20

// TestCacheHeapBoundedWithLargeOutcomes drives 400 tokens with ~60 KB
// outcomes each (24 MB in all) through a lease, a report and a GET with
// the cache on, then measures the live heap after a GC. The in-process
// layer keeps every terminal token it reads, so before it kept only what
// a read shows it held all 24 MB. Not parallel: the heap is the process's.
func TestCacheHeapBoundedWithLargeOutcomes(t *testing.T) {
	const tokens, outcome = 400, 60 << 10
	a := newAPI(t, withCache(t, redistest.URL(), &observer{}, nil))
	key := a.client()
	if res := a.do(request{method: http.MethodPut, path: "/v1/admin/operations/pay.big", key: a.operator(), body: `{"mode":"lease","lease_seconds":600}`}); res.status != http.StatusOK {
		t.Fatalf("PUT operation = %d %s", res.status, res.body)
	}
	result := fmt.Sprintf(`{"generation":1,"result":{"receipt":%q}}`, strings.Repeat("r", outcome))

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for i := range tokens {
		tok := a.issue(key, fmt.Sprint("big-", i), `{"operation":"pay.big","subject":"u","ttl_seconds":600}`)
		if res := a.post(key, "/v1/tokens/consume", fmt.Sprintf(`{"token":%q,"operation":"pay.big","subject":"u"}`, tok.Token)); res.status != http.StatusAccepted {
			t.Fatalf("consume: %d %s", res.status, res.body)
		}
		if res := a.post(key, "/v1/tokens/"+tok.ID+"/complete", result); res.status != http.StatusOK {
			t.Fatalf("complete: %d %.200s", res.status, res.body)
		}
		if res := a.get(key, "/v1/tokens/"+tok.ID); res.status != http.StatusOK || !strings.Contains(string(res.body), `"state":"consumed"`) {
			t.Fatalf("read: %d %s", res.status, res.body)
		}
	}
	after := heap()
	grew := int64(after) - int64(before)
	t.Logf("live heap grew by %.1f MB reading %d tokens with %d KB outcomes", float64(grew)/(1<<20), tokens, outcome>>10)
	if grew > heapBound {
		t.Fatalf("live heap grew by %d bytes, want under %d", grew, heapBound)
	}
}

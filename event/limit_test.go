package event_test

import (
	"testing"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/infra/store"
)

// TestMaxLimitIsTheStoresPage: the store's read of a page walks at most
// store.FeedMaxLimit positions, so a larger MaxLimit would cut pages short.
func TestMaxLimitIsTheStoresPage(t *testing.T) {
	if event.MaxLimit != store.FeedMaxLimit {
		t.Errorf("event.MaxLimit %d, store.FeedMaxLimit %d", event.MaxLimit, store.FeedMaxLimit)
	}
}

package event

import "github.com/tokend/tokend/internal/infra/store"

// Statements for plan tests.
var (
	HorizonSQL  = store.Statements().FeedHorizon
	PositionSQL = store.Statements().FeedPosition
	ReadSQL     = store.Statements().FeedRead
)

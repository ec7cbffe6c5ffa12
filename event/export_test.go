package event

import "github.com/tokend/tokend/internal/infra/store"

// Statements for plan tests.
var (
	HorizonSQL  = store.Statements()["feed horizon"]
	PositionSQL = store.Statements()["feed position"]
	ReadSQL     = store.Statements()["feed read"]
)

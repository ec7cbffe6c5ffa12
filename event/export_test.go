package event

// Statements for plan tests.
var (
	PendingSQL  = pendingSQL
	PositionSQL = positionSQL
	ReadSQL     = readSQL
)

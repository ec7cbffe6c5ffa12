package event

// Statements for plan tests.
var (
	HorizonSQL  = horizonSQL
	PositionSQL = positionSQL
	ReadSQL     = readSQL
)

package store

// Statements answers the package's statement texts by name, for the tests
// that check them (each runs, on Citus too; their plans): the texts are the
// package's own, and callers run them through its typed functions.
func Statements() map[string]string {
	return map[string]string{
		"feed horizon": feedHorizonSQL, "feed rebase": feedRebaseSQL, "feed notify": feedNotifySQL,
		"feed lock head": feedLockHeadSQL, "feed position": feedPositionSQL, "feed read": feedReadSQL,
		"feed head": feedHeadSQL, "feed stall": feedStallSQL, "feed held": feedHeldSQL,
	}
}

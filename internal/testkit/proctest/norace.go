//go:build !race

package proctest

// raceBuild is false in a test binary built without -race (see race.go).
const raceBuild = false

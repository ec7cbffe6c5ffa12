//go:build race

package proctest

// raceBuild is true in a test binary built with -race: its tokend builds get
// -race too, so they reuse the test build's compiled dependencies instead of
// compiling every one of them a second time without it.
const raceBuild = true

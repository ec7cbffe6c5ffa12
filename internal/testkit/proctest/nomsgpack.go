//go:build nomsgpack

package proctest

// The test binary was built with gin's nomsgpack tag (scripts/lib.sh puts it
// in GOFLAGS). A build with tags of its own replaces GOFLAGS' -tags, so
// BuildFlags names it again: without it, that build compiled gin, the
// MessagePack codec and every package above gin a second time.
func init() { ownTags = append(ownTags, "nomsgpack") }

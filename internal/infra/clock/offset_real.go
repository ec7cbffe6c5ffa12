//go:build !tokend_faketime

package clock

// offset is zero outside a tokend_faketime build: production clocks cannot
// be skewed.
const offset = 0

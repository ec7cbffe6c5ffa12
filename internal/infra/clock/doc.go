// Package clock is the process clock tokend records times of day with, and a
// seam to skew it in tests.
//
// tokend judges expiry, lease end and retention by the database's now(), so
// instances whose clocks disagree still agree on every verdict. The process
// clock only stamps what is recorded rather than judged (the millisecond
// timestamp at the front of token and operation ids), and bounds how long
// internal/infra/cache keeps a terminal token in memory, with a margin so that a
// clock behind the database's never shows a purged token. A test proves that
// claim by running tokend processes whose clocks are apart, and Go's
// time.Now cannot be faked from outside the process (it reads the vDSO, not
// libc, so neither faketime(1) nor LD_PRELOAD reach it). Hence Now.
//
// In a build with the tag tokend_faketime, Now is time.Now plus the duration
// in the environment variable TOKEND_FAKETIME_OFFSET, read once at start
// (time.ParseDuration syntax: "15s", "-15s"; unset or empty means no skew; a
// malformed value stops the process). In every other build, production
// included, the offset is the constant zero: no setting can skew it.
//
// The tag is not plain "faketime": that one is the Go runtime's own, for the
// playground, and freezes the whole runtime's time at 2009-11-10.
package clock

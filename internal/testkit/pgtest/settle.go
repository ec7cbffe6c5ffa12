package pgtest

import "time"

// SettleTimeout bounds a test's wait for its events to be positioned in the
// feed, and for what follows from them (a webhook delivered, a page read).
// Positions go to events once every older transaction on the server has
// ended, in any database: the other tests' too. On a busy machine a
// CREATE DATABASE from the template, which every test runs, holds one for
// tens of seconds on a Citus worker (seen: 11 s at load 13, over 30 s in a
// full Citus pass). It is a hang bound, not a speed assertion.
const SettleTimeout = 2 * time.Minute

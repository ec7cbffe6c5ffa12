// Package robust is tokend's robustness kit: real HTTP clients drive real
// tokend processes while faults are injected (nemeses), every request is
// recorded with its monotonic start and end, and the history is checked
// against a sequential model of the token contract (DESIGN.md "What a
// client may observe") with Porcupine, one partition per intent. The event
// feed and the ledger are checked beside it. See docs/robustness.md.
package robust

// Package faults is tokend's fault suite: the failure windows DESIGN.md says
// every release is tested against, injected into real `tokend serve`
// processes (internal/testkit/proctest) on a real Postgres.
//
// Each test drives a load through the REST API, injects one fault and then
// counts, with t.Logf, what DESIGN.md asks of every window: how many
// business effects happened (ledger entries per token, the balance), what
// the clients were told (by class of answer, after retrying with the same
// token until the answer is definitive), and who recovered and how long it
// took. The assertions are about effects and answers only; durations are
// measured and logged, never asserted, so a slow machine does not fail them.
//
//   - TestKillDuringSpendStorm: tokend is killed with SIGKILL while 16
//     clients spend 200 tokens, then restarted on the same address.
//   - TestPostgresRestartMidLoad: `pg_ctl restart`, in fast then in
//     immediate mode, under a load of issues and spends, on a throwaway
//     cluster of the test's own; tokend is not restarted.
//   - TestResponseLostAfterCommit: a TCP proxy drops the answer of a spend
//     that committed; the retry replays it.
//   - TestLeaseHolderDies: a lease holder never finishes; its lease runs out
//     under each expiry policy (takeover, unknown).
//   - TestSkewedClocksAgree: two tokend processes whose clocks are 30 s
//     apart (a tokend_faketime build, internal/infra/clock) agree on expiry and
//     lease end, because the database clock decides them.
//
// The tests are plain `go test` tests and run with the rest of the module
// (scripts/test). They need TOKEND_TEST_DATABASE_URL like internal/testkit/pgtest,
// and TestPostgresRestartMidLoad needs the PostgreSQL server binaries
// (initdb, pg_ctl; /usr/lib/postgresql/*/bin or PATH), run as the `postgres`
// OS user when the tests run as root. It never touches the shared server.
package faults

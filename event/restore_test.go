package event_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tokend/tokend/event"
	"github.com/tokend/tokend/internal/testkit/pgtest"
	"github.com/tokend/tokend/migrations"
)

// pgBin finds a Postgres program: on PATH, else in the newest
// /usr/lib/postgresql/*/bin.
func pgBin(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for i := len(dirs) - 1; i >= 0; i-- {
		if p := filepath.Join(dirs[i], name); fileExists(p) {
			return p
		}
	}
	t.Skipf("%s not found (on PATH or in /usr/lib/postgresql/*/bin): the restore test needs initdb, pg_ctl, pg_dump and pg_restore", name)
	return ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// asPostgres runs a server program as the postgres OS user when the test
// runs as root, which initdb refuses.
func asPostgres(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

// throwawayCluster starts a new Postgres cluster of its own (initdb, so a
// transaction id counter from the start) on a free loopback port, stopped
// and removed when t ends, and answers the URL of its postgres database.
func throwawayCluster(ctx context.Context, t *testing.T) string {
	t.Helper()
	return throwawayClusterAt(ctx, t, 0)
}

// throwawayClusterAt is throwawayCluster with its transaction id counter
// moved to nextXID (pg_resetwal -x) before it starts, unless 0: a cluster
// that has lived longer than the one backed up. nextXID must be a
// multiple of 1048576, the first transaction of a commit log segment,
// which the test creates zeroed.
func throwawayClusterAt(ctx context.Context, t *testing.T, nextXID uint64) string {
	t.Helper()
	initdb, pgCtl := pgBin(t, "initdb"), pgBin(t, "pg_ctl")
	dir, err := os.MkdirTemp("", "tokend-restore-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root without a postgres OS user to run initdb as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := asPostgres(ctx, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	if nextXID > 0 {
		if out, err := asPostgres(ctx, pgBin(t, "pg_resetwal"), "-x", strconv.FormatUint(nextXID, 10), "-D", data).CombinedOutput(); err != nil {
			t.Fatalf("pg_resetwal -x %d: %v\n%s", nextXID, err, out)
		}
		seg := filepath.Join(data, "pg_xact", fmt.Sprintf("%04X", nextXID/1048576))
		if out, err := asPostgres(ctx, "dd", "if=/dev/zero", "of="+seg, "bs=8192", "count=32").CombinedOutput(); err != nil {
			t.Fatalf("zero the commit log segment %s: %v\n%s", seg, err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -k %s -c fsync=off", port, dir)
	if out, err := asPostgres(ctx, pgCtl, "-D", data, "-l", filepath.Join(dir, "log"), "-w", "-t", "60", "-o", opts, "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() {
		_ = asPostgres(context.Background(), pgCtl, "-D", data, "-m", "immediate", "-w", "-t", "30", "stop").Run()
	})
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// writeN writes n events of tenant, one transaction each, on tokens
// prefix_1 … prefix_n, and answers their ids.
func writeN(ctx context.Context, t *testing.T, pool *pgxpool.Pool, tenant, prefix string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			id, err := write(ctx, tx, tenant, fmt.Sprintf("%s_%d", prefix, i+1), 1)
			ids = append(ids, id)
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// followFrom reads tenant's feed after cursor until it holds want events,
// failing on a gap or a repeat.
func followFrom(ctx context.Context, pool *pgxpool.Pool, tenant string, after int64, want int) ([]event.Event, error) {
	var got []event.Event
	seen := map[string]bool{}
	for len(got) < want {
		page, err := event.Read(ctx, pool, tenant, event.Query{After: after, Limit: 7})
		if err != nil {
			return got, err
		}
		for _, e := range page {
			if e.Position != after+1 || seen[e.ID] {
				return got, fmt.Errorf("after %d came position %d (event %s, seen before: %v)", after, e.Position, e.ID, seen[e.ID])
			}
			seen[e.ID] = true
			got = append(got, e)
			after = e.Position
		}
		if len(page) == 0 {
			select {
			case <-ctx.Done():
				return got, fmt.Errorf("%d of %d events: %w", len(got), want, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return got, nil
}

// TestCursorsSurviveARestore: a feed filled and read on one cluster, with
// events still waiting for their position, is dumped (pg_dump) and restored
// into a new cluster, whose transaction ids start over below the ones the
// feed was positioned by. Consumers holding cursors from before the dump
// then read every event written before the dump that they had not read,
// and every event written after the restore, each once, with no gap; a
// cursor past what the dump held is refused with ErrCursorAhead while the
// feed has not reached it, and with ErrCursorEpoch, naming where to resume,
// once it has (given the epoch it was read in).
func TestCursorsSurviveARestore(t *testing.T) {
	pgDump, pgRestore := pgBin(t, "pg_dump"), pgBin(t, "pg_restore")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const tenant = "t"
	srcURL := pgtest.NewURL(t)
	src, err := pgxpool.New(ctx, srcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if onCitus(ctx, t, src) {
		t.Skip("a Citus cluster is backed up and restored node by node, not with pg_dump into one Postgres; on Citus the rebase meets a shard moved to another worker")
	}

	// A server fresh from initdb is where the restored cluster's counter
	// starts: the feed must be positioned past it for the test to mean
	// anything.
	for {
		var xid int64
		if err := src.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if xid > 5000 {
			break
		}
	}
	before := writeN(ctx, t, src, tenant, "old", 30)
	read, err := followFrom(ctx, src, tenant, 0, 30) // positions 1-30 handed out
	if err != nil {
		t.Fatal(err)
	}
	if read[29].ID != before[29] {
		t.Fatalf("feed before the dump ends with %s, want %s", read[29].ID, before[29])
	}
	waiting := writeN(ctx, t, src, tenant, "waiting", 5) // written, never positioned before the dump

	dump := filepath.Join(t.TempDir(), "feed.dump")
	if out, err := exec.CommandContext(ctx, pgDump, "-Fc", "-f", dump, "-d", srcURL).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	// The source goes on after the dump: a consumer reads it to position 45,
	// past what the dump holds (30), in the source's epoch.
	writeN(ctx, t, src, tenant, "lost", 10)
	if _, err := followFrom(ctx, src, tenant, 30, 15); err != nil {
		t.Fatal(err)
	}
	srcPage, err := event.ReadPage(ctx, src, tenant, event.Query{After: 45})
	if err != nil || len(srcPage.Events) != 0 || srcPage.Epoch == "" {
		t.Fatalf("source after 45 = %+v, %v; want no event and an epoch", srcPage, err)
	}
	admin := throwawayCluster(ctx, t)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE tokend`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	dstURL := replaceDB(admin, "tokend")
	if out, err := exec.CommandContext(ctx, pgRestore, "--no-owner", "--exit-on-error", "-d", dstURL, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	// tokend serve applies migrations at start: nothing to apply.
	mconn, err := pgx.Connect(ctx, dstURL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Schema.Apply(ctx, mconn); err != nil {
		t.Fatal(err)
	}
	mconn.Close(ctx)
	dst, err := pgxpool.New(ctx, dstURL)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var headXID, nextXID string
	if err := src.QueryRow(ctx, `SELECT xid::text FROM event_feed_heads WHERE tenant_id = $1`, tenant).Scan(&headXID); err != nil {
		t.Fatal(err)
	}
	if err := dst.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text`).Scan(&nextXID); err != nil {
		t.Fatal(err)
	}
	t.Logf("feed positioned up to transaction %s; the restored cluster's next is %s", headXID, nextXID)

	after := writeN(ctx, t, dst, tenant, "new", 20)
	want := append(append([]string{}, waiting...), after...)
	for _, cursor := range []int64{30, 20} {
		wait, cancel := context.WithTimeout(ctx, pgtest.SettleTimeout)
		got, err := followFrom(wait, dst, tenant, cursor, int(30-cursor)+len(want))
		cancel()
		if err != nil {
			t.Fatalf("from cursor %d after the restore: %v; %s", cursor, err, pgtest.Unsettled(dst))
		}
		ids := map[string]int{}
		for _, e := range got {
			ids[e.ID]++
		}
		for _, id := range append(append([]string{}, before[cursor:]...), want...) {
			if ids[id] != 1 {
				t.Errorf("from cursor %d: event %s read %d times, want once", cursor, id, ids[id])
			}
		}
		if len(got) != int(30-cursor)+len(want) {
			t.Errorf("from cursor %d: %d events, want %d", cursor, len(got), int(30-cursor)+len(want))
		}
	}
	// The restored feed has grown past the consumer's cursor 45 (to 55), at
	// positions it hands out anew: the cursor of the source's epoch is
	// refused, and told to resume after 30, where the restored feed left
	// that epoch; cursors at or below 30 read on, in the new epoch.
	_, err = event.ReadPage(ctx, dst, tenant, event.Query{After: 45, Epoch: srcPage.Epoch})
	var epochErr *event.CursorEpochError
	if !errors.As(err, &epochErr) || epochErr.Resume != 30 || epochErr.Epoch == srcPage.Epoch || epochErr.Epoch == "" {
		t.Fatalf("cursor 45 of the source's epoch after the restore = %v, want ErrCursorEpoch resuming after 30 in a new epoch", err)
	}
	for _, cursor := range []int64{30, 20, 0} {
		page, err := event.ReadPage(ctx, dst, tenant, event.Query{After: cursor, Epoch: srcPage.Epoch, Limit: 1})
		if err != nil || len(page.Events) != 1 || page.Events[0].Position != cursor+1 || page.Epoch != epochErr.Epoch {
			t.Errorf("cursor %d of the source's epoch = %+v, %v; want position %d in epoch %s", cursor, page, err, cursor+1, epochErr.Epoch)
		}
	}
	if page, err := event.ReadPage(ctx, dst, tenant, event.Query{After: 45, Epoch: epochErr.Epoch}); err != nil || len(page.Events) != 10 {
		t.Errorf("cursor 45 of the new epoch = %d events, %v; want 10", len(page.Events), err)
	}
	if _, err := event.ReadPage(ctx, dst, tenant, event.Query{After: 1, Epoch: "unknown"}); !errors.Is(err, event.ErrCursorEpoch) {
		t.Errorf("a cursor of an epoch the feed never had = %v, want ErrCursorEpoch", err)
	}
	more, err := event.Read(ctx, dst, tenant, event.Query{After: 55})
	if err != nil || len(more) != 0 {
		t.Errorf("past the end = %d events, %v; want none", len(more), err)
	}
	if _, err := event.Read(ctx, dst, tenant, event.Query{After: 56}); !errors.Is(err, event.ErrCursorAhead) {
		t.Errorf("a cursor past the restored feed = %v, want ErrCursorAhead", err)
	}
}

// TestRestoreIntoAClusterAheadStartsAnEpoch: a feed dumped (pg_dump) and
// restored into a cluster whose transaction counter is already ahead of
// the source's (pg_resetwal -x), so that every id the feed holds looks
// settled there, still starts a new epoch: it was positioned on another
// node (event nodeSQL). A consumer that read on the source past the dump
// is refused with ErrCursorEpoch, resuming where the dump's feed ended,
// before the restored feed reaches its cursor and after, never given an
// empty page in the old epoch, which would skip the restored feed's new
// events at those positions.
func TestRestoreIntoAClusterAheadStartsAnEpoch(t *testing.T) {
	pgDump, pgRestore := pgBin(t, "pg_dump"), pgBin(t, "pg_restore")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	const tenant = "t"
	srcURL := pgtest.NewURL(t)
	src, err := pgxpool.New(ctx, srcURL)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if onCitus(ctx, t, src) {
		t.Skip("a Citus cluster is backed up and restored node by node, not with pg_dump into one Postgres")
	}
	writeN(ctx, t, src, tenant, "old", 20)
	if _, err := followFrom(ctx, src, tenant, 0, 20); err != nil {
		t.Fatal(err)
	}
	dump := filepath.Join(t.TempDir(), "feed.dump")
	if out, err := exec.CommandContext(ctx, pgDump, "-Fc", "-f", dump, "-d", srcURL).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	// After the dump the source goes on, and a consumer reads it to 30.
	writeN(ctx, t, src, tenant, "lost", 10)
	if _, err := followFrom(ctx, src, tenant, 20, 10); err != nil {
		t.Fatal(err)
	}
	srcPage, err := event.ReadPage(ctx, src, tenant, event.Query{After: 30})
	if err != nil || srcPage.Epoch == "" {
		t.Fatalf("source after 30 = %+v, %v", srcPage, err)
	}
	var srcNext uint64
	if err := src.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&srcNext); err != nil {
		t.Fatal(err)
	}
	ahead := (srcNext/1048576 + 2) * 1048576
	admin := throwawayClusterAt(ctx, t, ahead)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE tokend`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	dstURL := replaceDB(admin, "tokend")
	if out, err := exec.CommandContext(ctx, pgRestore, "--no-owner", "--exit-on-error", "-d", dstURL, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	dst, err := pgxpool.New(ctx, dstURL)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	var dstNext uint64
	if err := dst.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&dstNext); err != nil {
		t.Fatal(err)
	}
	if dstNext < ahead || dstNext <= srcNext {
		t.Fatalf("the restored cluster's next transaction is %d, want at least %d, past the source's %d", dstNext, ahead, srcNext)
	}
	t.Logf("source's next transaction %d; the restored cluster's %d", srcNext, dstNext)

	check := func(when string) {
		t.Helper()
		page, err := event.ReadPage(ctx, dst, tenant, event.Query{After: 30, Epoch: srcPage.Epoch})
		var epochErr *event.CursorEpochError
		if !errors.As(err, &epochErr) || epochErr.Resume != 20 || epochErr.Epoch == srcPage.Epoch {
			t.Fatalf("%s: cursor 30 of the source's epoch = %d events in epoch %q, %v; want ErrCursorEpoch resuming after 20 in a new epoch",
				when, len(page.Events), page.Epoch, err)
		}
	}
	check("restored")
	newer := writeN(ctx, t, dst, tenant, "new", 10)
	wait, cancelWait := context.WithTimeout(ctx, pgtest.SettleTimeout)
	got, err := followFrom(wait, dst, tenant, 20, 10)
	cancelWait()
	if err != nil {
		t.Fatalf("the restored feed after 20: %v; %s", err, pgtest.Unsettled(dst))
	}
	for i, e := range got {
		if e.ID != newer[i] {
			t.Errorf("restored feed position %d = %s, want %s", e.Position, e.ID, newer[i])
		}
	}
	check("the restored feed at 30")
}

// replaceDB answers url with its database changed to name.
func replaceDB(url, name string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		panic(err)
	}
	return fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
}

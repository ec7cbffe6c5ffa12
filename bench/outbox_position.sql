-- bench/outbox_position.sql: bench_position(), one positioning step of the
-- feed for tenant pgb: event/sql.go's lockHeadSQL and positionSQL in one
-- call, as tokend's dispatcher runs them for a tenant with webhooks.
-- Used by scripts/bench-outbox and scripts/bench-cpu outbox.
CREATE FUNCTION bench_position() RETURNS void LANGUAGE plpgsql AS $$
DECLARE head bigint; hx xid8; hs bigint;
BEGIN
  INSERT INTO event_feed_heads AS h (tenant_id, pos) VALUES ('pgb', 0)
  ON CONFLICT (tenant_id) DO UPDATE SET pos = h.pos RETURNING pos, xid, seq INTO head, hx, hs;
  WITH settled AS (
      SELECT token_id, xid, seq, at, row_number() OVER (ORDER BY xid, seq) AS n
      FROM (SELECT token_id, xid, seq, at FROM token_events
            WHERE tenant_id = 'pgb' AND (xid, seq) > (hx, hs)
              AND xid < pg_snapshot_xmin(pg_current_snapshot())
            ORDER BY xid, seq LIMIT 1000) s
  ), numbered AS (
      INSERT INTO event_positions (tenant_id, pos, token_id, seq, at)
      SELECT 'pgb', head + n, token_id, seq, at FROM settled
  ), last AS (
      SELECT xid, seq, n FROM settled ORDER BY n DESC LIMIT 1
  )
  UPDATE event_feed_heads h SET pos = head + last.n, xid = last.xid, seq = last.seq
  FROM last WHERE h.tenant_id = 'pgb';
END $$;

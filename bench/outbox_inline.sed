# bench/outbox_inline.sed: bench/spend.sql with the values the trigger
# token_events_xid fills (migration 014) written by the INSERT itself, for
# the "inline" side of scripts/bench-cpu outbox (the trigger disabled): what
# the trigger's plpgsql call adds over the values alone.
#   sed -f bench/outbox_inline.sed bench/spend.sql > spend_inline.sql
s/^INSERT INTO token_events (seq, xid, /INSERT INTO token_events (event_id, xid, seq, /
s/^VALUES (0, :event_xid, /VALUES ('evt_' || replace(gen_random_uuid()::text, '-', ''), pg_current_xact_id(), nextval('token_events_seq_seq'), /

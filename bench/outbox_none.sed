# bench/outbox_none.sed: bench/spend.sql as it was before the outbox, for the
# "none" side of scripts/bench-outbox and scripts/bench-cpu outbox (with
# bench/outbox_off.sql): the event's seq from the identity's default, once,
# and no event id or xid.
#   sed -f bench/outbox_none.sed bench/spend.sql > spend_none.sql
s/^INSERT INTO token_events (seq, xid, /INSERT INTO token_events (/
/^OVERRIDING SYSTEM VALUE$/d
s/^VALUES (0, :event_xid, /VALUES (/

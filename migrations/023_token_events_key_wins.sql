---- tern: disable-tx ----
-- A lookup of one event by its key takes token_events' primary key
-- (issue 43, item 1).
--
-- Both indexes of token_events lead with tenant_id: the primary key
-- (tenant_id, token_id, seq) and token_events_settling (tenant_id, xid,
-- seq). A prepared statement settles on a generic plan at its sixth
-- execution, and on a table never analyzed and still small the two cost
-- the planner exactly the same for a lookup of one event; the tie goes to
-- the newest index, which was the settling index (migration 008). The
-- claim's lease, the fan-out and the feed's read of an event then walked
-- the tenant's settling entries under that plan, more with every event (4
-- to 114 buffers per call by 22,000 events), until an ANALYZE.
--
-- The settling index cannot stop leading with tenant_id (positioning
-- reads a tenant's events in (xid, seq) order), and replacing it with one
-- no lookup can use takes two releases (bench/results/issue43.md, section
-- 9). Rebuilding the primary key makes it the newest index instead, so it
-- wins the tie; same columns, same name, same constraint, so the previous
-- release sees no change. An index added to token_events later that leads
-- with tenant_id takes the tie back:
-- store.TestDeliveryStatementsStayFlatAsTheBacklogGrows fails then.
--
-- CONCURRENTLY, outside a transaction: events go on being written while
-- the new index builds. A rebuild stopped halfway (a lock wait past
-- lock_timeout at the swap, a crash) leaves the new copy, token_events_pkey_ccnew,
-- or the old one, _ccold, beside the primary key, valid or not; the
-- constraint's index is always the one named token_events_pkey. A rerun
-- drops those copies first (a moment's lock each) and rebuilds.
DO $$
DECLARE
    i regclass;
BEGIN
    FOR i IN
        SELECT x.indexrelid::regclass FROM pg_index x
        JOIN pg_class c ON c.oid = x.indexrelid
        WHERE x.indrelid = 'token_events'::regclass
          AND c.relname LIKE 'token\_events\_pkey\_cc%'
    LOOP
        EXECUTE format('DROP INDEX %s', i);
    END LOOP;
END
$$;

REINDEX INDEX CONCURRENTLY token_events_pkey;

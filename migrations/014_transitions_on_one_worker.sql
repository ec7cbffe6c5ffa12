-- An issue is sent as three statements, each on one tenant (internal/store
-- IssueSQL, IssueEventSQL, PolicyCurrentSQL), so that Citus commits it on
-- the one worker holding the tenant, in one phase. The check that the
-- cached policy is still current comes last, after the insert; this
-- function fails the statement, and with it the transaction or savepoint,
-- when it is not: SQLSTATE TD001, which tokend reads as "policy changed,
-- read it again and retry".
CREATE FUNCTION tokend_policy_current(current_version bigint, issued_under bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF current_version IS DISTINCT FROM issued_under THEN
        RAISE EXCEPTION 'operation policy changed: version % is current, the token was built under %', current_version, issued_under
            USING ERRCODE = 'TD001';
    END IF;
    RETURN true;
END
$$;

-- The issue's event is recorded by an INSERT … SELECT from the token's row
-- (IssueEventSQL). Citus runs such a statement on the worker, in the
-- transaction's one phase, only when it calls no volatile function; the
-- defaults of token_events called three (seq's identity, event_id's random
-- id, xid's transaction id), so Citus ran it through the coordinator and
-- committed with two phases. The trigger of 012, which runs where the row
-- is stored, now fills all three: the id and xid when not given, and seq
-- always, from the identity's sequence where the row is stored (on Citus
-- each worker holds it with a range of its own above the coordinator's).
-- Always: an INSERT that still goes through the coordinator (a sweep's)
-- would otherwise take the coordinator's lower range, and a token's last
-- event would sort before its earlier ones. The record statements give seq
-- as 0 (OVERRIDING SYSTEM VALUE) so that the identity's default is not
-- called at all.
ALTER TABLE token_events ALTER COLUMN event_id DROP DEFAULT;

ALTER TABLE token_events ALTER COLUMN xid DROP DEFAULT;

CREATE OR REPLACE FUNCTION token_events_xid() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.xid := pg_current_xact_id();
    IF NEW.event_id IS NULL THEN
        NEW.event_id := 'evt_' || replace(gen_random_uuid()::text, '-', '');
    END IF;
    NEW.seq := nextval('token_events_seq_seq');
    RETURN NEW;
END
$$;

-- A transition of one token is two statements too (internal/store
-- Transition): its change stamps the token with a random transition id,
-- and its record inserts the event of the token carrying that id, read
-- from the token's row. The id tells the record whether this transaction's
-- change moved the token (a conditional change may match nothing).
ALTER TABLE tokens ADD COLUMN transition_id bigint;

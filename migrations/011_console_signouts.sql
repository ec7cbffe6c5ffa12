-- Console sessions signed out before they expired. A session lives in a
-- signed cookie; signing out clears the cookie, and records the session here
-- so that a copy of the cookie taken before is refused on every instance.
-- A row is of no use once the session has expired, and is deleted then
-- (websession.SignOuts deletes a tenant's expired rows at each sign-out).
CREATE TABLE console_signouts (
    tenant_id  text        NOT NULL,
    session_id text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);

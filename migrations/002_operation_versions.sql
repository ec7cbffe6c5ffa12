-- Every declaration of an operation gets a version never used before, from a
-- sequence rather than a per-row counter, so a policy deleted and declared
-- again cannot repeat a version. Issuers cache policies in process and check
-- the version they used in the same statement as the insert (intent/sql.go),
-- so a token is never issued under a policy that has since changed.
CREATE SEQUENCE operation_versions;

ALTER TABLE operations ADD COLUMN version bigint NOT NULL DEFAULT nextval('operation_versions');

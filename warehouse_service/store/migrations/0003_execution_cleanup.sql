-- Cleanup of what failed and cancelled executions leave behind: their result tables
-- (dropped with purge) and files written but never committed. Whatever ends an execution
-- FAILED or CANCELLED (its unit, a unit's restart, the lease sweep), the ledger marks its
-- cleanup PENDING in the same statement; the registry's cleaner works the pending rows,
-- retrying with backoff (cleanup_next_at), until DONE.

ALTER TABLE executions
    ADD COLUMN cleanup_state text NOT NULL DEFAULT 'NOT_NEEDED'
        CHECK (cleanup_state IN ('NOT_NEEDED', 'PENDING', 'DONE')),
    ADD COLUMN cleanup_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN cleanup_next_at timestamptz,
    ADD COLUMN cleanup_error text NOT NULL DEFAULT '',
    ADD COLUMN cleaned_at timestamptz;

CREATE INDEX executions_cleanup_due ON executions (cleanup_next_at)
    WHERE cleanup_state = 'PENDING';

CREATE FUNCTION executions_cleanup_on_failure() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('FAILED', 'CANCELLED') AND OLD.state NOT IN ('FAILED', 'CANCELLED') THEN
        NEW.cleanup_state := 'PENDING';
        NEW.cleanup_next_at := now();
        -- Its tables are being dropped: from now on the ledger lists none of them.
        DELETE FROM execution_outputs WHERE execution_id = NEW.execution_id;
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER executions_cleanup_on_failure BEFORE UPDATE OF state ON executions
    FOR EACH ROW EXECUTE FUNCTION executions_cleanup_on_failure();

-- Executions that ended before this migration may have left the same behind.
UPDATE executions SET cleanup_state = 'PENDING', cleanup_next_at = now()
WHERE state IN ('FAILED', 'CANCELLED');
DELETE FROM execution_outputs USING executions
WHERE executions.execution_id = execution_outputs.execution_id
  AND executions.state IN ('FAILED', 'CANCELLED');

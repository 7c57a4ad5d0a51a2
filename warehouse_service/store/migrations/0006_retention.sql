-- Deleting executions, retention policies, and the maintenance of ended executions' tables.
--
-- A deleted execution keeps its row as a tombstone (deleted_at); its tables are dropped by
-- the cleaner of migration 0003, which the deletion marks PENDING again. Maintenance (expiring
-- the superseded snapshots of its telemetry tables, removing files no snapshot references)
-- is due once an execution ends, and is worked like a cleanup: claimed, retried with backoff.

ALTER TABLE executions
    ADD COLUMN deleted_at timestamptz,
    ADD COLUMN maintenance_state text NOT NULL DEFAULT 'NOT_NEEDED'
        CHECK (maintenance_state IN ('NOT_NEEDED', 'PENDING', 'DONE')),
    ADD COLUMN maintenance_attempts integer NOT NULL DEFAULT 0,
    ADD COLUMN maintenance_next_at timestamptz,
    ADD COLUMN maintenance_error text NOT NULL DEFAULT '',
    ADD COLUMN maintained_at timestamptz;

CREATE INDEX executions_maintenance_due ON executions (maintenance_next_at)
    WHERE maintenance_state = 'PENDING';
-- The retention loop ranks each workflow's executions of a warehouse, newest first.
CREATE INDEX executions_by_workflow ON executions (warehouse_id, workflow_id, created_at DESC)
    WHERE deleted_at IS NULL;

CREATE FUNCTION executions_maintenance_on_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
       AND OLD.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN
        NEW.maintenance_state := 'PENDING';
        NEW.maintenance_next_at := now();
    END IF;
    RETURN NEW;
END;
$$;

CREATE TRIGGER executions_maintenance_on_end BEFORE UPDATE OF state ON executions
    FOR EACH ROW EXECUTE FUNCTION executions_maintenance_on_end();

UPDATE executions SET maintenance_state = 'PENDING', maintenance_next_at = now()
WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED');

-- A warehouse without a row keeps every execution; a limit that is NULL does not apply.
CREATE TABLE warehouse_retention (
    warehouse_id    uuid PRIMARY KEY REFERENCES warehouses ON DELETE CASCADE,
    max_age_seconds bigint CHECK (max_age_seconds >= 60),
    keep_last       integer CHECK (keep_last BETWEEN 1 AND 100000),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

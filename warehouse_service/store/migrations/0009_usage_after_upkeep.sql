-- Dropping an execution's tables (a cleanup, a deletion) and tending them (snapshot expiry,
-- orphan removal) change what it stores: once either is done, its figures are read again,
-- so a warehouse's usage follows deletions, retention and maintenance.

CREATE FUNCTION execution_usage_after_upkeep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF (NEW.cleanup_state = 'DONE' AND OLD.cleanup_state IS DISTINCT FROM 'DONE')
       OR (NEW.maintenance_state = 'DONE' AND OLD.maintenance_state IS DISTINCT FROM 'DONE') THEN
        UPDATE execution_usage SET measure_due_at = now(), measure_attempts = 0
        WHERE execution_id = NEW.execution_id;
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER execution_usage_after_upkeep
    AFTER UPDATE OF cleanup_state, maintenance_state ON executions
    FOR EACH ROW EXECUTE FUNCTION execution_usage_after_upkeep();

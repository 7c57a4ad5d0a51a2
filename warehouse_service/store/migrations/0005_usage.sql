-- What each ended execution stores, measured by the registry from its tables' Iceberg metadata
-- (the current snapshot's summary totals), and per warehouse the sum over its executions.
-- A trigger keeps the warehouse's sums in step with every change of an execution's figures, in
-- the same transaction, so reading a warehouse's usage is one row whatever its history.

CREATE TABLE execution_usage (
    execution_id     text PRIMARY KEY REFERENCES executions ON DELETE CASCADE,
    warehouse_id     uuid NOT NULL REFERENCES warehouses ON DELETE CASCADE,
    bytes            bigint NOT NULL DEFAULT 0 CHECK (bytes >= 0),
    data_files       bigint NOT NULL DEFAULT 0 CHECK (data_files >= 0),
    rows             bigint NOT NULL DEFAULT 0 CHECK (rows >= 0),
    snapshots        bigint NOT NULL DEFAULT 0 CHECK (snapshots >= 0),
    tables           bigint NOT NULL DEFAULT 0 CHECK (tables >= 0),
    -- When the figures were last read from the catalog; NULL before the first reading.
    measured_at      timestamptz,
    -- Set while a (new) reading is due; the meter retries with backoff until it succeeds.
    measure_due_at   timestamptz,
    measure_attempts integer NOT NULL DEFAULT 0,
    measure_error    text NOT NULL DEFAULT ''
);
CREATE INDEX execution_usage_due ON execution_usage (measure_due_at)
    WHERE measure_due_at IS NOT NULL;

CREATE TABLE warehouse_usage (
    warehouse_id        uuid PRIMARY KEY REFERENCES warehouses ON DELETE CASCADE,
    bytes               bigint NOT NULL DEFAULT 0,
    data_files          bigint NOT NULL DEFAULT 0,
    rows                bigint NOT NULL DEFAULT 0,
    snapshots           bigint NOT NULL DEFAULT 0,
    tables              bigint NOT NULL DEFAULT 0,
    -- Ended executions, and those of them whose (new) reading is still due.
    executions          bigint NOT NULL DEFAULT 0,
    executions_pending  bigint NOT NULL DEFAULT 0,
    updated_at          timestamptz NOT NULL DEFAULT now()
);

-- Adds one execution's figures to its warehouse's sums (sign 1), or takes them out (-1).
CREATE FUNCTION warehouse_usage_add(figures execution_usage, sign integer) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO warehouse_usage AS w (warehouse_id, bytes, data_files, rows, snapshots, tables,
                                      executions, executions_pending)
    VALUES (figures.warehouse_id, sign * figures.bytes, sign * figures.data_files,
            sign * figures.rows, sign * figures.snapshots, sign * figures.tables, sign,
            sign * (figures.measure_due_at IS NOT NULL)::integer)
    ON CONFLICT (warehouse_id) DO UPDATE SET
        bytes = w.bytes + excluded.bytes,
        data_files = w.data_files + excluded.data_files,
        rows = w.rows + excluded.rows,
        snapshots = w.snapshots + excluded.snapshots,
        tables = w.tables + excluded.tables,
        executions = w.executions + excluded.executions,
        executions_pending = w.executions_pending + excluded.executions_pending,
        updated_at = now();
$$;

CREATE FUNCTION warehouse_usage_follows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        PERFORM warehouse_usage_add(OLD, -1);
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') THEN
        PERFORM warehouse_usage_add(NEW, 1);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER warehouse_usage_follows AFTER INSERT OR UPDATE OR DELETE ON execution_usage
    FOR EACH ROW EXECUTE FUNCTION warehouse_usage_follows();

-- An execution that ends is measured: its tables no longer change.
CREATE FUNCTION execution_usage_on_end() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
       AND OLD.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN
        INSERT INTO execution_usage (execution_id, warehouse_id, measure_due_at)
        VALUES (NEW.execution_id, NEW.warehouse_id, now())
        ON CONFLICT (execution_id) DO UPDATE SET measure_due_at = now();
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER execution_usage_on_end AFTER UPDATE OF state ON executions
    FOR EACH ROW EXECUTE FUNCTION execution_usage_on_end();

-- Executions that ended before this migration are measured too.
INSERT INTO execution_usage (execution_id, warehouse_id, measure_due_at)
SELECT execution_id, warehouse_id, now() FROM executions
WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED');

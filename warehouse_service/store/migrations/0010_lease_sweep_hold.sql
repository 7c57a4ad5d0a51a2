-- The lease sweep's hold (see warehouse_service/leases.py): a registry replica that could not
-- reach this database (or that has just started) cannot know the heartbeats it failed to
-- record, so it holds every replica's sweep until a full lease after it is back. One row,
-- shared by all replicas; the sweep counts a lease lapsed only once both its expiry and
-- hold_until have passed.

CREATE TABLE lease_sweep_hold (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    hold_until timestamptz NOT NULL
);

INSERT INTO lease_sweep_hold (hold_until) VALUES ('-infinity');

-- Warehouses shared with other users: who holds which role on whose warehouse. The owner is
-- no member (warehouses.owner_user_id says who owns it); a revoked role is a deleted row.

CREATE TABLE warehouse_members (
    warehouse_id       uuid NOT NULL REFERENCES warehouses ON DELETE CASCADE,
    user_id            text NOT NULL,
    role               text NOT NULL CHECK (role IN ('READER', 'WRITER')),
    granted_by_user_id text NOT NULL,
    granted_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (warehouse_id, user_id)
);
-- ListWarehouses finds the warehouses shared with the caller.
CREATE INDEX warehouse_members_by_user ON warehouse_members (user_id, warehouse_id);

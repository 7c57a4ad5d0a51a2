-- The registry's tables: warehouses, the execution ledger, computing units.
-- No column holds a secret: storage credentials live in the catalog only.

CREATE TABLE warehouses (
    warehouse_id           uuid PRIMARY KEY,
    owner_user_id          text NOT NULL,
    display_name           text NOT NULL,
    catalog_warehouse_id   uuid NOT NULL,
    catalog_warehouse_name text NOT NULL,
    bucket                 text NOT NULL,
    key_prefix             text NOT NULL,
    region                 text NOT NULL,
    endpoint               text NOT NULL,
    path_style_access      boolean NOT NULL,
    flavor                 text NOT NULL,
    sts_enabled            boolean NOT NULL,
    sts_role_arn           text NOT NULL,
    state                  text NOT NULL
        CHECK (state IN ('ACTIVE', 'ARCHIVED', 'DELETING', 'DELETED')),
    credential_version     bigint NOT NULL DEFAULT 1,
    create_request_id      text,
    request_fingerprint    text NOT NULL,
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_user_id, create_request_id)
);
CREATE INDEX warehouses_by_owner ON warehouses (owner_user_id, created_at, warehouse_id);

-- Rotations already applied, so that a retried rotation with its request_id is a no-op.
CREATE TABLE credential_rotations (
    warehouse_id       uuid NOT NULL REFERENCES warehouses ON DELETE CASCADE,
    request_id         text NOT NULL,
    credential_version bigint NOT NULL,
    rotated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (warehouse_id, request_id)
);

CREATE TABLE computing_units (
    computing_unit_id  text PRIMARY KEY,
    endpoint           text NOT NULL,
    capacity           integer NOT NULL CHECK (capacity > 0),
    running_executions integer NOT NULL DEFAULT 0,
    queued_executions  integer NOT NULL DEFAULT 0,
    state              text NOT NULL CHECK (state IN ('HEALTHY', 'LOST')),
    registered_at      timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at  timestamptz NOT NULL DEFAULT now(),
    lease_expires_at   timestamptz NOT NULL
);

CREATE TABLE executions (
    execution_id         text PRIMARY KEY,
    owner_user_id        text NOT NULL,
    warehouse_id         uuid NOT NULL REFERENCES warehouses,
    computing_unit_id    text NOT NULL REFERENCES computing_units,
    workflow_id          text NOT NULL,
    workflow_fingerprint text NOT NULL,
    request_id           text,
    state                text NOT NULL
        CHECK (state IN ('QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED')),
    error_reason         text NOT NULL DEFAULT '',
    error_message        text NOT NULL DEFAULT '',
    error_operator_id    text NOT NULL DEFAULT '',
    progress             jsonb NOT NULL DEFAULT '{}',
    created_at           timestamptz NOT NULL DEFAULT now(),
    started_at           timestamptz,
    ended_at             timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_user_id, request_id)
);
CREATE INDEX executions_by_owner ON executions (owner_user_id, created_at DESC, execution_id DESC);
CREATE INDEX executions_by_warehouse ON executions (warehouse_id, state);
CREATE INDEX executions_by_unit ON executions (computing_unit_id, state);

CREATE TABLE execution_outputs (
    execution_id text NOT NULL REFERENCES executions ON DELETE CASCADE,
    operator_id  text NOT NULL,
    namespace    text NOT NULL,
    table_name   text NOT NULL,
    row_count    bigint NOT NULL,
    snapshot_id  bigint NOT NULL,
    file_count   bigint NOT NULL,
    PRIMARY KEY (execution_id, operator_id)
);

-- Computing units as resources owned by users, and who else may run on them.
-- A unit's registration (computing_units) exists once its process has started.

CREATE TABLE units (
    unit_id             text PRIMARY KEY,
    owner_user_id       text NOT NULL,
    display_name        text NOT NULL,
    cores               integer NOT NULL CHECK (cores > 0),
    memory_mib          integer NOT NULL CHECK (memory_mib > 0),
    default_unit        boolean NOT NULL DEFAULT false,
    state               text NOT NULL
        CHECK (state IN ('PROVISIONING', 'RUNNING', 'STOPPED', 'FAILED', 'DELETING', 'DELETED')),
    state_message       text NOT NULL DEFAULT '',
    create_request_id   text,
    request_fingerprint text NOT NULL,
    launched_at         timestamptz,
    last_used_at        timestamptz NOT NULL DEFAULT now(),
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_user_id, create_request_id)
);
CREATE INDEX units_by_owner ON units (owner_user_id, created_at, unit_id);
-- At most one default unit per user.
CREATE UNIQUE INDEX one_default_unit ON units (owner_user_id)
    WHERE default_unit AND state <> 'DELETED';

CREATE TABLE unit_shares (
    unit_id    text NOT NULL REFERENCES units ON DELETE CASCADE,
    user_id    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (unit_id, user_id)
);
CREATE INDEX unit_shares_by_user ON unit_shares (user_id);

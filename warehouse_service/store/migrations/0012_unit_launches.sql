-- Each launch of a unit gives its credential a generation of its own, kept here while the
-- launch lasts: a credential of an earlier launch (the unit was restarted, stopped or deleted)
-- is refused. The address the launcher gave the launch is the only one its unit may register.

ALTER TABLE units ADD COLUMN credential_generation text;
ALTER TABLE units ADD COLUMN launch_address text;

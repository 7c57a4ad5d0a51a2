-- Whether a unit confines the Python workers that run users' code (see
-- RegisterComputingUnitRequest.workers_confined), as it said when it last registered: each
-- registration sets it again. A unit that does not runs only its owner's executions unless the
-- registry allows otherwise (TEXERA_LAKE_WAREHOUSE_SHARE_UNCONFINED_UNITS). Registrations made
-- before this migration count as unconfined until their units register again.

ALTER TABLE computing_units ADD COLUMN workers_confined boolean NOT NULL DEFAULT false;

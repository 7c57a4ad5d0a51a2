"""The registry's background work: the work queue's workers (cleanup, maintenance), usage metering,
lease sweeps, and what they do to executions' tables."""

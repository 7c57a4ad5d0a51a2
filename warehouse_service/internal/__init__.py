"""The registry's internal services: the execution ledger, units' leases, executions' credentials,
and the checks they share."""

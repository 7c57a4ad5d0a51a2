"""The warehouse registry: warehouses, the execution ledger and computing units."""

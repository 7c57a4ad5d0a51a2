"""The registry's database: its connection pool, schema migrations, and the statements that read
and write warehouses' memberships, usage, retention, launches, units' leases and the work queue."""

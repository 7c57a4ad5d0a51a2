"""The registry's database: its connection pool, schema migrations, and the statements that read
and write warehouses' memberships, usage, retention, launches and the work queue."""

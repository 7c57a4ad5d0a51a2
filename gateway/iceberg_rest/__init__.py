"""A read-only Iceberg REST catalog for users, served by the gateway beside its gRPC port.

Any Iceberg engine (pyiceberg, DuckDB, Spark) connects with a user's Texera token and sees, as
catalog warehouses, the warehouses the user holds READER or more on (by warehouse id, the
catalog's `prefix`); in each, only the tables of executions that are running or succeeded.
Loads go on to the warehouse's catalog with a read-only token the registry issues for that
user's call, and come back with storage credentials vended for the one table loaded; every
write is refused (403). See docs/iceberg-rest.md.
"""

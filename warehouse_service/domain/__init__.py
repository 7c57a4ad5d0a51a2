"""What the registry's records mean, shared by every layer above: the states and storage
flavors the database and the API name, warehouse roles, and the usage figures of tables."""

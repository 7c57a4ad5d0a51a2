"""The registry's catalog: its REST client and OAuth2 clients (Lakekeeper's management and Iceberg
REST APIs), the interface to warehouses' tables with its REST and SQL catalog backends, deletion
profiles and purges."""

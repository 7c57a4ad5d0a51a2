"""The registry's catalog: its REST client and OAuth2 clients (Lakekeeper's management and Iceberg
REST APIs), the SQL catalog's tables, deletion profiles and purges."""

"""A development catalog that speaks Lakekeeper's management API and the Iceberg REST API.

It stands in for Lakekeeper where Lakekeeper cannot run (tests, the embedded
stack): same paths, field names, status codes and error shape as the published
specs, for the part this project and pyiceberg use. Iceberg semantics come from
pyiceberg's SqlCatalog, one per warehouse, on PostgreSQL. It is development
infrastructure and no service imports it: services reach it over HTTP only.
"""

"""The catalog gatekeeper: the Iceberg REST catalog as computing units see it.

A unit never holds a catalog token of its own. For each execution it gets from the registry
(ExecutionCredentialService.OpenExecutionCatalog) a short-lived token naming the execution, its unit,
its submitter and the source tables it reads, and the gatekeeper's address. The gatekeeper,
served by the registry on a port of its own, takes only such tokens and lets each reach:

- the execution's own tables (created, loaded, committed, purged, and their storage
  credentials), while the execution is bound to that unit and has not ended;
- its source tables, loaded read only;
- the warehouse's config and the three namespaces executions write into;

and nothing else. It forwards what it lets through to the warehouse's catalog with the
registry's own identity: write access for the execution's tables, read access for its
sources.
"""

"""The registry's public services: validation of requests, the API's records, and who may do what
(warehouses, computing units, executions' deletion, retention, usage)."""

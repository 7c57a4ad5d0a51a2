"""A computing unit: runs executions on Spark and writes their results as Iceberg tables."""

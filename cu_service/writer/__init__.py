"""Writing results as Iceberg tables: files from Spark tasks, commits from the driver."""

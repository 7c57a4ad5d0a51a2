"""The embedded stack's S3 endpoint: moto with IAM authentication, behind a gate."""

"""FileIO properties of the mesh's own, beside pyiceberg's."""

from __future__ import annotations

#: FileIO property: the CA bundle (a PEM file's path) S3 servers are verified against; absent,
#: the system's trust store. A path, no secret, so it travels to Spark tasks with the rest.
S3_CA_BUNDLE = "s3.ca-bundle"

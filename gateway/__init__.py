"""The gateway: the mesh's one public gRPC endpoint."""

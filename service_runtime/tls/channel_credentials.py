"""A client's credentials for calling a TLS server of the mesh."""

from __future__ import annotations

import grpc

from service_runtime.tls.mesh_client import MeshClientTls


def mesh_channel_credentials(
    ca_bundle: str, *, certificate_chain: str = "", private_key: str = ""
) -> grpc.ChannelCredentials:
    """Credentials that trust the servers whose certificates the CAs in the file ca_bundle
    signed (and whose names match the host the channel targets); with certificate_chain and
    private_key (its file readable by its owner only), the caller presents its own
    certificate, for servers that require one (mutual TLS). The files are read now: a
    rotated client certificate takes a new channel."""
    return MeshClientTls.from_files(
        ca_bundle, certificate_chain=certificate_chain, private_key=private_key
    ).credentials()

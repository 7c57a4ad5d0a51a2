"""A client's credentials for calling a TLS server of the mesh."""

from __future__ import annotations

import grpc

from service_runtime.config import read_setting_file


def mesh_channel_credentials(
    ca_bundle: str, *, certificate_chain: str = "", private_key: str = ""
) -> grpc.ChannelCredentials:
    """Credentials that trust the servers whose certificates the CAs in the file ca_bundle
    signed (and whose names match the host the channel targets); with certificate_chain and
    private_key (its file readable by its owner only), the caller presents its own
    certificate, for servers that require one (mutual TLS). The files are read now: a
    rotated client certificate takes a new channel."""
    if bool(certificate_chain) != bool(private_key):
        raise ValueError("a client certificate needs both its chain and its private key")
    return grpc.ssl_channel_credentials(
        root_certificates=read_setting_file(ca_bundle, "the CA bundle", secret=False),
        private_key=(
            read_setting_file(private_key, "the private key file", secret=True)
            if private_key
            else None
        ),
        certificate_chain=(
            read_setting_file(certificate_chain, "the certificate file", secret=False)
            if certificate_chain
            else None
        ),
    )

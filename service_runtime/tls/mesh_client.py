"""What a service presents and trusts when it calls another service of the mesh over TLS, and
the channels that use it.

The files are read once, when the service starts: a computing unit removes its secret files
before users' code runs, so its key must be in memory by then. A rotated client certificate
therefore takes a restart (servers, by contrast, read theirs again before each handshake).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import grpc

from service_runtime.config import ConfigError, ServerSettings, read_setting_file


@dataclass(frozen=True)
class MeshClientTls:
    """The CA bundle that servers' certificates must chain to, and the caller's own
    certificate chain and key for servers that require one (mutual TLS). Picklable."""

    ca_bundle: bytes = field(repr=False)
    certificate_chain: bytes | None = field(default=None, repr=False)
    private_key: bytes | None = field(default=None, repr=False)

    @classmethod
    def from_files(
        cls, ca_bundle: str, *, certificate_chain: str = "", private_key: str = ""
    ) -> MeshClientTls:
        """Reads the files now; ValueError naming the file that cannot be used."""
        if bool(certificate_chain) != bool(private_key):
            raise ValueError("a client certificate needs both its chain and its private key")
        return cls(
            ca_bundle=read_setting_file(ca_bundle, "the CA bundle", secret=False),
            certificate_chain=(
                read_setting_file(certificate_chain, "the certificate file", secret=False)
                if certificate_chain
                else None
            ),
            private_key=(
                read_setting_file(private_key, "the private key file", secret=True)
                if private_key
                else None
            ),
        )

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> MeshClientTls | None:
        """The service's outgoing TLS by its settings (see ServerSettings.client_certificate);
        None without a CA bundle: its calls to the mesh stay plaintext."""
        if not settings.tls_ca_bundle:
            return None
        certificate, key = settings.client_certificate
        try:
            return cls.from_files(
                settings.tls_ca_bundle, certificate_chain=certificate, private_key=key
            )
        except ValueError as exc:
            raise ConfigError(f"cannot call the mesh over TLS: {exc}") from exc

    def server_verification_only(self) -> MeshClientTls:
        """The CA bundle alone, without the caller's certificate and key: for code that runs
        beside users' code (an execution's Spark tasks), which must never hold the key."""
        return replace(self, certificate_chain=None, private_key=None)

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_bundle,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )


def _server_name_options(server_name: str) -> list[tuple[str, Any]]:
    """The channel option that makes TLS check server_name in place of the target's host."""
    return [("grpc.ssl_target_name_override", server_name)] if server_name else []


def mesh_channel(
    target: str,
    tls: MeshClientTls | None,
    *,
    options: Sequence[tuple[str, Any]] = (),
    interceptors: Sequence[grpc.aio.ClientInterceptor] = (),
    server_name: str = "",
) -> grpc.aio.Channel:
    """An asyncio channel to target: TLS with tls, plaintext without. The server's
    certificate must name server_name if given (a computing unit's, see
    authority.unit_server_name), else target's host (a DNS or IP subject alternative name)."""
    if tls is None:
        return grpc.aio.insecure_channel(target, options=options, interceptors=interceptors)
    return grpc.aio.secure_channel(
        target,
        tls.credentials(),
        options=[*options, *_server_name_options(server_name)],
        interceptors=interceptors,
    )


def blocking_mesh_channel(
    target: str,
    tls: MeshClientTls | None,
    *,
    server_name: str = "",
    options: Sequence[tuple[str, Any]] = (),
) -> grpc.Channel:
    """A blocking channel to target: TLS with tls, plaintext without (see mesh_channel)."""
    if tls is None:
        return grpc.insecure_channel(target, options=options)
    return grpc.secure_channel(
        target, tls.credentials(), [*options, *_server_name_options(server_name)]
    )

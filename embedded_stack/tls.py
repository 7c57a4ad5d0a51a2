"""The embedded stack's TLS mode: a CA of its own and a certificate for each service, made anew
under ``<state dir>/tls`` at each start (keys 0600), and the settings that hand them over.

The gateway serves TLS without asking for client certificates (the edge: users' tokens say who
calls); the registry and the result service serve mutual TLS, requiring a certificate from the
stack's CA, with their caller rules on; every service calls the others over TLS presenting its
own certificate. The registry gets an issuer for computing units' certificates (an intermediate
of the stack's CA, constrained to units' names): units serve mutual TLS with certificates of
their own, taking users' calls from the gateway's certificate alone, and reach the registry on
its unit port (see warehouse_service.units.unit_port).
"""

from __future__ import annotations

import ipaddress
import shutil
from dataclasses import dataclass
from pathlib import Path

from service_runtime.config import ENV_PREFIX
from service_runtime.tls.authority import (
    LOCAL_ADDRESSES,
    LOCAL_NAMES,
    SERVICE_LIFETIME,
    UNIT_ISSUER_LIFETIME,
    IPAddress,
    MeshAuthority,
)
from service_runtime.tls.identity import UNIT_DOMAIN, service_identity
from service_runtime.tls.mesh_client import MeshClientTls

TLS_FOLDER = "tls"
CA_FILE = "ca.pem"
#: The services that require client certificates from the stack's CA (the gateway does not).
MUTUAL = frozenset({"warehouse-service", "result-service"})


@dataclass(frozen=True)
class CertificateFiles:
    certificate: Path
    key: Path


class StackTls:
    """The stack's CA and its services' certificates."""

    def __init__(self, folder: Path, host: str, services: tuple[str, ...]) -> None:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o700, parents=True)
        self.folder = folder
        self._authority = authority = MeshAuthority.create(
            common_name="texera-lake embedded stack CA"
        )
        authority.write_bundle(self.ca_file)
        self._names = _names_of(host)
        self.certificates: dict[str, CertificateFiles] = {}
        for service in services:
            self.certificates[service] = CertificateFiles(
                folder / f"{service}.pem", folder / f"{service}-key.pem"
            )
            self.rotate(service)
        self.unit_issuer = CertificateFiles(
            folder / "unit-issuer.pem", folder / "unit-issuer-key.pem"
        )
        issuer = authority.issue_authority(
            "texera-lake embedded stack units' issuer",
            lifetime=UNIT_ISSUER_LIFETIME,
            dns_domain=UNIT_DOMAIN,
        )
        issuer.authority.write(self.unit_issuer.certificate, self.unit_issuer.key)

    def rotate(self, service: str) -> int:
        """Issues service a new certificate and key and writes them over its files (the key
        first, each file replaced whole: the service serves the new pair from its next
        handshake); the new certificate's serial."""
        names, addresses = self._names
        files = self.certificates[service]
        issued = self._authority.issue(
            service_identity(service),
            lifetime=SERVICE_LIFETIME,
            dns_names=names,
            ip_addresses=addresses,
        )
        issued.write(files.certificate, files.key)
        return issued.certificate.serial_number

    @property
    def ca_file(self) -> Path:
        return self.folder / CA_FILE

    def service_settings(self, service: str, scope: str) -> dict[str, str]:
        """The TLS settings of service (its settings' scope): serving with its certificate,
        requiring clients' from the CA if it is one of MUTUAL, and calling the mesh over TLS
        with the same certificate."""
        files = self.certificates[service]
        prefix = f"{ENV_PREFIX}{scope}_TLS_"
        settings = {
            f"{prefix}CERTIFICATE_FILE": str(files.certificate),
            f"{prefix}KEY_FILE": str(files.key),
            f"{prefix}CA_BUNDLE_FILE": str(self.ca_file),
        }
        if service in MUTUAL:
            settings[f"{prefix}REQUIRE_CLIENT_CERTIFICATE"] = "true"
            settings[f"{prefix}CLIENT_CA_FILE"] = str(self.ca_file)
        if service == "warehouse-service":
            issuer = f"{ENV_PREFIX}{scope}_UNIT_ISSUER_"
            settings[f"{issuer}CERTIFICATE_FILE"] = str(self.unit_issuer.certificate)
            settings[f"{issuer}KEY_FILE"] = str(self.unit_issuer.key)
        if service == "gateway":
            settings[f"{ENV_PREFIX}{scope}_UNITS_TLS"] = "true"
        return settings

    def client(self, presenting: str | None) -> MeshClientTls:
        """A client's TLS: the CA, and the certificate of service presenting (None: none)."""
        if presenting is None:
            return MeshClientTls.from_files(str(self.ca_file))
        files = self.certificates[presenting]
        return MeshClientTls.from_files(
            str(self.ca_file), certificate_chain=str(files.certificate), private_key=str(files.key)
        )


def _names_of(host: str) -> tuple[tuple[str, ...], tuple[IPAddress, ...]]:
    """The names and addresses a certificate names: this machine's, and host's."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return tuple(dict.fromkeys((*LOCAL_NAMES, host))), LOCAL_ADDRESSES
    if address.is_unspecified or address in LOCAL_ADDRESSES:
        return LOCAL_NAMES, LOCAL_ADDRESSES
    return LOCAL_NAMES, (*LOCAL_ADDRESSES, address)

"""Computing units' TLS certificates: issued by the registry when it launches a unit, and
renewed, for the key the unit keeps, from the signing request in its heartbeats.

The registry signs them with an issuer of its own (``WAREHOUSE_UNIT_ISSUER_CERTIFICATE`` and
``_KEY``), an intermediate of the mesh's CA. A unit's certificate names its identity
(``spiffe://texera-lake/unit/<unit id>``) and its server name (``<hash>.unit.texera-lake``,
see service_runtime.tls.identity.unit_server_name), never an address: the gateway checks the
name of the unit it means to call, so a unit that takes over another's address is refused.
The issuer should be constrained to that domain and to no IP address (the embedded stack's
is: authority.MeshAuthority.issue_authority), so that what it signs cannot pass for a
service's server. Whatever a signing request asks for, the certificate names only the unit
whose credential carried it.
"""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from service_runtime.config import ConfigError, read_setting_file
from service_runtime.errors import FieldViolation, ServiceError, invalid_argument
from service_runtime.tls.authority import IssuedCertificate, MeshAuthority
from service_runtime.tls.identity import unit_identity, unit_server_name
from unit_launcher.unit_settings import ComputingUnitSettings

#: The signing request's field in a heartbeat, named in errors.
REQUEST_FIELD = "certificate_signing_request"
#: The curves a unit's key may be on.
_CURVES = (ec.SECP256R1, ec.SECP384R1)


def unit_secret(setting: str) -> str:
    """The name a unit's setting is handed over by, as the launcher hands secrets: its
    variable without ``_FILE`` (the launcher names the file)."""
    return ComputingUnitSettings.variable_of(setting).removesuffix("_FILE")


class UnitCertificates:
    """Issues units' certificates from the registry's issuer, each valid for lifetime."""

    def __init__(self, issuer: MeshAuthority, lifetime: datetime.timedelta) -> None:
        self._issuer = issuer
        self._lifetime = lifetime

    @classmethod
    def from_files(
        cls, certificate_chain: str, private_key: str, lifetime: datetime.timedelta
    ) -> UnitCertificates:
        """The issuer from its chain (its own certificate first) and key; ConfigError naming
        the file that cannot be used, never showing the key."""
        try:
            chain_pem = read_setting_file(certificate_chain, "the units' issuer", secret=False)
            key_pem = read_setting_file(private_key, "the units' issuer's key", secret=True)
            chain = x509.load_pem_x509_certificates(chain_pem)
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"cannot issue units' certificates: {exc}") from None
        if not isinstance(key, ec.EllipticCurvePrivateKey) or _public(key) != _public(chain[0]):
            raise ConfigError(
                f"cannot issue units' certificates: the key ({private_key}) is not the EC key of "
                f"the issuer's certificate ({certificate_chain})"
            )
        return cls(MeshAuthority(IssuedCertificate(chain[0], key, tuple(chain[1:]))), lifetime)

    @staticmethod
    def unit_settings() -> dict[str, str]:
        """What every unit launched with a certificate is set to: mutual TLS, its callers'
        certificates checked against the CA bundle it is handed (see unit_port.unit_trust)."""
        return {ComputingUnitSettings.variable_of("tls_require_client_certificate"): "true"}

    def at_launch(self, unit_id: str) -> dict[str, str]:
        """A unit's certificate chain and new key, as the secrets a launched unit reads (by
        its settings' names: the launcher hands them over as files)."""
        issued = self._issuer.issue(
            unit_identity(unit_id),
            lifetime=self._lifetime,
            dns_names=[unit_server_name(unit_id)],
            ip_addresses=[],
        )
        return {
            unit_secret("tls_certificate"): issued.chain_pem.decode(),
            unit_secret("tls_key"): issued.private_key_pem.decode(),
        }

    def renewed(self, unit_id: str, signing_request: bytes) -> bytes:
        """A new certificate chain for the key of signing_request (PEM), naming unit_id alone;
        INVALID_ARGUMENT naming the field if the request does not hold up."""
        public_key = _requested_key(signing_request)
        certificate = self._issuer.certify(
            unit_identity(unit_id),
            public_key,
            lifetime=self._lifetime,
            dns_names=[unit_server_name(unit_id)],
            ip_addresses=[],
        )
        return self._issuer.chain_pem(certificate)


def _public(holder: ec.EllipticCurvePrivateKey | x509.Certificate) -> bytes:
    return holder.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _requested_key(signing_request: bytes) -> ec.EllipticCurvePublicKey:
    """The key a signing request is for, once its signature shows the requester holds it."""
    try:
        request = x509.load_pem_x509_csr(signing_request)
    except ValueError:
        raise _invalid("must be a PEM certificate signing request") from None
    key = request.public_key()
    if not (isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, _CURVES)):
        raise _invalid("must be for an EC key on P-256 or P-384")
    if not request.is_signature_valid:
        raise _invalid("must be signed by the key it is for")
    return key


def _invalid(description: str) -> ServiceError:
    return invalid_argument([FieldViolation(REQUEST_FIELD, description)])

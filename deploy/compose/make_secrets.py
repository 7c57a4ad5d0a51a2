"""Writes the secret files of docker-compose.yml's services into volumes, before they start.

Each service of the mesh gets a folder of its own in the ``lake-secrets`` volume (mode 0700,
owned by the uid the service runs as) with only its secrets in files of mode 0600; the public
keys and the CA's certificate go to ``public/``, readable by all. Keys are generated on the
first run and kept. Only this one-shot container sees the values that come from the
environment (the Texera JWT secret and the registry database's URL, from .env; in the global
catalog modes the platform bucket's key, and in global-sql the SQL catalog's URL, which the
result service gets too: see deploy/compose/global*.yml).

The secrets of the registry's two OAuth2 clients (its own, the catalog's operator, and its
reader client, whose tokens readers get) are generated here too, and Keycloak learns them from
the realm it imports: keycloak/texera-lake-realm.json with the secrets filled in, written into
Keycloak's import folder (a volume of its own) readable only by Keycloak's uid.

One bearer token for the services' /metrics, generated once: in each service's folder as
``metrics_token``, and in ``metrics/`` (owned by the uid of the Prometheus image) for a scraper
that mounts the volume, as its ``authorization: {credentials_file: ...}``.

TLS: a CA of the stack (service_runtime.tls.authority), whose key stays in a volume of its own
that only this container mounts, kept across runs and made anew when it would expire before a
certificate issued now. Each run issues new certificates from it: each mesh service's, naming
its SPIFFE ID and its compose host name (and localhost, for its health check); the registry's
issuer of computing units' certificates, an intermediate constrained to names under
``unit.texera-lake`` and to no IP address; and server certificates of the servers outside the
mesh (Keycloak, Lakekeeper's TLS proxy, MinIO, the PostgreSQL servers), written into the
``server-tls`` volume, a folder per server owned by the uid that reads its key.

    python make_secrets.py /run/texera-lake /run/keycloak-import /run/server-tls /run/mesh-ca
"""

from __future__ import annotations

import datetime
import json
import os
import secrets
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from service_runtime.internal_tokens import generate_private_key, public_key_text
from service_runtime.tls.authority import (
    CLOCK_SKEW,
    LOCAL_ADDRESSES,
    LOCAL_NAMES,
    IssuedCertificate,
    MeshAuthority,
)
from service_runtime.tls.identity import UNIT_DOMAIN, service_identity

#: uid each service runs as (docker-compose.yml's `user:` entries; the registry is root, since
#: it runs each computing unit as a system user of its own).
UIDS = {"gateway": 10010, "warehouse-service": 0, "result-service": 10012}
#: uid of the Keycloak image's user.
KEYCLOAK_UID = 1000
#: uid of the Prometheus image's user (nobody), which reads the metrics token.
PROMETHEUS_UID = 65534
#: The file of the metrics token, in each service's folder and in the scraper's.
METRICS_TOKEN_FILE = "metrics_token"  # noqa: S105 - a file name, not a secret
#: uids of the other servers' processes: PostgreSQL's (Debian images), nginx's, MinIO's (root).
POSTGRES_UID = 999
NGINX_UID = 101
MINIO_UID = 0
#: The servers outside the mesh that serve TLS, by folder of the server-tls volume: the uid
#: that reads the key, and the host names the certificate names (the compose service clients
#: call; localhost for a port published to the host, and for the health check).
SERVERS: dict[str, tuple[int, tuple[str, ...]]] = {
    "keycloak": (KEYCLOAK_UID, ("keycloak", "localhost")),
    # nginx in Lakekeeper's network namespace: clients call it as "lakekeeper".
    "lakekeeper": (NGINX_UID, ("lakekeeper", "localhost")),
    "minio": (MINIO_UID, ("minio", "localhost")),
    "catalog-db": (POSTGRES_UID, ("catalog-db",)),
    "registry-db": (POSTGRES_UID, ("registry-db",)),
    "openfga-db": (POSTGRES_UID, ("openfga-db",)),
    "sql-catalog-db": (POSTGRES_UID, ("sql-catalog-db",)),
}
#: How long the CA lasts, and each certificate issued from it (issued anew at every run).
CA_LIFETIME = datetime.timedelta(days=3 * 365)
CERTIFICATE_LIFETIME = datetime.timedelta(days=90)
CA_FILE = "ca.pem"
REALM_TEMPLATE = Path(__file__).parent / "keycloak" / "texera-lake-realm.json"
#: Clients of the registry in the realm (its own and its reader client), and what stands for
#: their secrets in the template.
REGISTRY_CLIENT_ID = "texera-lake-registry"
READER_CLIENT_ID = "texera-lake-reader"
SECRET_PLACEHOLDER = "generated-by-make-secrets"  # noqa: S105 - stands in for the secret
#: The file of the registry's folder that holds each client's secret.
CLIENT_SECRET_FILES = {
    REGISTRY_CLIENT_ID: "catalog_client_secret",
    READER_CLIENT_ID: "catalog_reader_client_secret",
}


def _write(folder: Path, name: str, value: str, uid: int, mode: int = 0o600) -> None:
    """Replaces folder/name whole (a service that reloads its certificate reads the old file or
    the new one), the new file owned by uid with mode from the start."""
    temporary = folder / f".{name}.new"
    temporary.unlink(missing_ok=True)
    temporary.touch(mode=mode)
    temporary.chmod(mode)  # touch's mode is narrowed by the umask
    os.chown(temporary, uid, uid)
    temporary.write_text(value)
    temporary.replace(folder / name)


def _folder(path: Path, uid: int, mode: int = 0o700) -> Path:
    path.mkdir(mode=mode, parents=True, exist_ok=True)
    path.chmod(mode)
    os.chown(path, uid, uid)
    return path


def _kept(folder: Path, name: str, make: str) -> str:
    path = folder / name
    return path.read_text() if path.exists() else make


def realm_with_secrets(template: str, client_secrets: Mapping[str, str]) -> str:
    """The realm to import: the template with each client's secret (by client id) in place."""
    realm = json.loads(template)
    for client_id, secret in client_secrets.items():
        (client,) = [c for c in realm["clients"] if c["clientId"] == client_id]
        if client["secret"] != SECRET_PLACEHOLDER:
            raise ValueError(f"the realm template's {client_id} secret is not a placeholder")
        client["secret"] = secret
    return json.dumps(realm, indent=2)


def platform_files(environ: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The global modes' secret files, by service: the platform bucket's key for the registry
    (global-rest: to create the warehouse in the catalog); with a SQL catalog (global-sql)
    also its URL, and the result service gets both, since it opens the SQL catalog itself."""
    if "PLATFORM_ACCESS_KEY_ID" not in environ:
        return {}
    platform = {
        "platform_access_key_id": environ["PLATFORM_ACCESS_KEY_ID"],
        "platform_secret_access_key": environ["PLATFORM_SECRET_ACCESS_KEY"],
    }
    if "SQL_CATALOG_URL" not in environ:
        return {"warehouse-service": platform}
    sql = {**platform, "sql_catalog_url": environ["SQL_CATALOG_URL"]}
    return {"warehouse-service": sql, "result-service": sql}


def stack_authority(folder: Path) -> MeshAuthority:
    """The stack's CA, kept in folder (0700, this container's only); a new one when there is
    none yet or it would expire before a certificate issued now."""
    certificate_path, key_path = folder / CA_FILE, folder / "ca-key.pem"
    if certificate_path.exists() and key_path.exists():
        certificate = x509.load_pem_x509_certificate(certificate_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        horizon = datetime.datetime.now(datetime.UTC) + CERTIFICATE_LIFETIME
        if (
            isinstance(key, ec.EllipticCurvePrivateKey)
            and certificate.not_valid_after_utc > horizon
        ):
            return MeshAuthority(IssuedCertificate(certificate, key))
    authority = MeshAuthority.create(common_name="texera-lake compose CA", lifetime=CA_LIFETIME)
    authority.authority.write(certificate_path, key_path)
    return authority


def server_certificate(authority: MeshAuthority, names: Sequence[str]) -> IssuedCertificate:
    """A certificate for a server outside the mesh: its host names, for server authentication
    only, and no SPIFFE ID (it cannot pass for a service of the mesh, nor call one)."""
    key = ec.generate_private_key(ec.SECP256R1())
    issuer = authority.authority
    now = datetime.datetime.now(datetime.UTC)
    usage = x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=False,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )
    alternative_names = x509.SubjectAlternativeName([x509.DNSName(name) for name in names])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(issuer.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + CERTIFICATE_LIFETIME)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage, critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(alternative_names, critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.private_key.public_key()),
            critical=False,
        )
        .sign(issuer.private_key, hashes.SHA256())
    )
    return IssuedCertificate(certificate, key)


def mesh_tls_files(authority: MeshAuthority) -> dict[str, dict[str, str]]:
    """Each mesh service's certificate and key (the key first: written in this order), and the
    registry's issuer of units' certificates."""
    files: dict[str, dict[str, str]] = {}
    for service in UIDS:
        issued = authority.issue(
            service_identity(service),
            lifetime=CERTIFICATE_LIFETIME,
            dns_names=(service, *LOCAL_NAMES),
            ip_addresses=LOCAL_ADDRESSES,
        )
        files[service] = {
            "tls_key": issued.private_key_pem.decode(),
            "tls_certificate": issued.chain_pem.decode(),
        }
    issuer = authority.issue_authority(
        "texera-lake compose units' issuer",
        lifetime=CERTIFICATE_LIFETIME,
        dns_domain=UNIT_DOMAIN,
    ).authority
    files["warehouse-service"] |= {
        "unit_issuer_key": issuer.private_key_pem.decode(),
        "unit_issuer_certificate": issuer.chain_pem.decode(),
    }
    return files


def write_server_tls(folder: Path, authority: MeshAuthority) -> None:
    """The CA's certificate at the volume's top (for every client there), and each server's
    certificate and key in a folder of its own, as MinIO's certs dir wants them (public.crt,
    private.key; MinIO's console trusts the CA from CAs/)."""
    _folder(folder, 0, 0o755)
    ca_pem = authority.certificate_pem.decode()
    _write(folder, CA_FILE, ca_pem, 0, 0o644)
    for server, (uid, names) in SERVERS.items():
        own = _folder(folder / server, uid)
        issued = server_certificate(authority, names)
        _write(own, "private.key", issued.private_key_pem.decode(), uid)
        _write(own, "public.crt", issued.certificate_pem.decode(), uid)
    _write(_folder(folder / "minio" / "CAs", MINIO_UID), CA_FILE, ca_pem, MINIO_UID)


def main(root: Path, keycloak_import: Path, server_tls: Path, authority_folder: Path) -> None:
    folders = {service: _folder(root / service, uid) for service, uid in UIDS.items()}
    authority = stack_authority(_folder(authority_folder, 0))
    gateway_key = _kept(folders["gateway"], "signing_key", generate_private_key())
    registry_key = _kept(folders["warehouse-service"], "signing_key", generate_private_key())
    client_secrets = {
        client_id: _kept(folders["warehouse-service"], name, secrets.token_urlsafe(32))
        for client_id, name in CLIENT_SECRET_FILES.items()
    }
    # Kept in the scraper's folder, which Prometheus's configuration names.
    scraper = _folder(root / "metrics", PROMETHEUS_UID)
    metrics_token = _kept(scraper, METRICS_TOKEN_FILE, secrets.token_urlsafe(48))
    _write(scraper, METRICS_TOKEN_FILE, metrics_token, PROMETHEUS_UID)
    files = {
        "gateway": {
            "jwt_secret": os.environ["TEXERA_LAKE_JWT_SECRET"],
            "signing_key": gateway_key,
        },
        "warehouse-service": {
            "database_url": os.environ["REGISTRY_DATABASE_URL"],
            "signing_key": registry_key,
            "page_token_key": _kept(
                folders["warehouse-service"], "page_token_key", secrets.token_urlsafe(48)
            ),
            **{name: client_secrets[c] for c, name in CLIENT_SECRET_FILES.items()},
        },
        "result-service": {
            "page_token_key": _kept(
                folders["result-service"], "page_token_key", secrets.token_urlsafe(48)
            ),
        },
    }
    for service, values in [
        *platform_files(os.environ).items(),
        *mesh_tls_files(authority).items(),
    ]:
        files[service] |= values
    for service, values in files.items():
        values[METRICS_TOKEN_FILE] = metrics_token
        for name, value in values.items():
            _write(folders[service], name, value, UIDS[service])
    public = _folder(root / "public", 0, 0o755)
    _write(public, "gateway_public_key", public_key_text(gateway_key), 0, 0o644)
    _write(public, "registry_public_key", public_key_text(registry_key), 0, 0o644)
    _write(public, CA_FILE, authority.certificate_pem.decode(), 0, 0o644)
    _folder(keycloak_import, KEYCLOAK_UID)
    realm = realm_with_secrets(REALM_TEMPLATE.read_text(), client_secrets)
    _write(keycloak_import, REALM_TEMPLATE.name, realm, KEYCLOAK_UID)
    write_server_tls(server_tls, authority)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))

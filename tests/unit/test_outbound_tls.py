"""Outbound TLS: the catalog client, pyiceberg's REST catalog, S3 FileIOs and the registry's
database verify servers against a configured CA bundle (catalog_map.trust)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from aiohttp import web

from catalog_map.backends import CatalogFactory, catalog_verify
from catalog_map.trust import OutboundTlsSettings
from lake_tables.io_properties import S3_CA_BUNDLE
from lake_tables.pyiceberg_arrow import SmallWritesFileIO, StorageFileIO
from service_runtime.config import ConfigError
from service_runtime.outbound_tls import ServerTrust
from tests.loopback_http import served
from tests.unit.tls_files import MeshFiles
from texera.lake.internal.v1 import registry_service_pb2
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.tables import CatalogUnavailable
from warehouse_service.store.db_tls import database_ssl


@dataclass(frozen=True)
class HttpsCatalog:
    url: str
    ca_bundle: Path


async def _config(request: web.Request) -> web.Response:
    return web.json_response({"defaults": {}, "overrides": {"prefix": "the-prefix"}})


@pytest.fixture
async def https_catalog(tmp_path: Path) -> AsyncIterator[HttpsCatalog]:
    """A catalog's /v1/config over HTTPS on 127.0.0.1, its certificate from a test CA."""
    mesh = MeshFiles.create(tmp_path)
    server = mesh.issue("catalog")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(server.certificate, server.key)
    app = web.Application()
    app.router.add_get("/catalog/v1/config", _config)
    async with served(app, context) as url:
        yield HttpsCatalog(f"{url}/catalog", mesh.ca_bundle)


async def _prefix(catalog: HttpsCatalog, trust: ServerTrust) -> str:
    client = CatalogClient(
        f"{catalog.url}/../management", catalog.url, "project", attempts=1, trust=trust
    )
    await client.open()
    try:
        return await client.prefix("w")
    finally:
        await client.close()


async def test_catalog_client_trusts_the_configured_ca(https_catalog: HttpsCatalog) -> None:
    assert await _prefix(https_catalog, ServerTrust(str(https_catalog.ca_bundle))) == "the-prefix"


async def test_catalog_client_refuses_a_certificate_of_an_unknown_ca(
    https_catalog: HttpsCatalog,
) -> None:
    with pytest.raises(CatalogUnavailable, match="certificate was refused"):
        await _prefix(https_catalog, ServerTrust())


async def test_turning_verification_off_is_logged_and_connects(
    https_catalog: HttpsCatalog, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    trust = OutboundTlsSettings(catalog_tls_verify=False).catalog_trust()
    assert await _prefix(https_catalog, trust) == "the-prefix"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("NOT verified" in w and "CATALOG_TLS_VERIFY" in w for w in warnings)


def test_verification_on_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    OutboundTlsSettings().catalog_trust()
    assert caplog.records == []


def _rest_binding(uri: str) -> registry_service_pb2.CatalogBinding:
    return registry_service_pb2.CatalogBinding(
        warehouse_id="w1", catalog_uri=uri, catalog_warehouse="w", catalog_token="token"
    )


async def test_pyiceberg_rest_catalog_trusts_the_configured_ca(
    https_catalog: HttpsCatalog,
) -> None:
    ca = str(https_catalog.ca_bundle)
    factory = CatalogFactory(catalog_trust=ServerTrust(ca), storage_io={S3_CA_BUNDLE: ca})
    catalog = await asyncio.to_thread(factory.build, _rest_binding(https_catalog.url))
    assert catalog.properties["prefix"] == "the-prefix"  # from /v1/config
    assert catalog_verify(catalog) == ca
    assert catalog.properties[S3_CA_BUNDLE] == ca  # reaches its tables' FileIO


async def test_pyiceberg_rest_catalog_refuses_an_unknown_ca(https_catalog: HttpsCatalog) -> None:
    with pytest.raises(requests.exceptions.SSLError):
        await asyncio.to_thread(CatalogFactory().build, _rest_binding(https_catalog.url))


def _s3_options(io: StorageFileIO) -> dict[str, object]:
    filesystem = io.fs_by_scheme("s3", "bucket")
    options: dict[str, object] = filesystem.__reduce__()[1][0]
    return options


@pytest.mark.parametrize("kind", [StorageFileIO, SmallWritesFileIO])
def test_s3_file_systems_verify_against_the_storage_ca(
    kind: type[StorageFileIO], tmp_path: Path
) -> None:
    ca = str(MeshFiles.create(tmp_path).ca_bundle)
    properties = {"s3.region": "us-east-1", "s3.endpoint": "https://127.0.0.1:9"}
    assert _s3_options(kind({**properties, S3_CA_BUNDLE: ca}))["tls_ca_file_path"] == ca
    assert _s3_options(kind(properties))["tls_ca_file_path"] == ""  # the system's


def test_storage_settings_give_the_ca_as_a_file_io_property(tmp_path: Path) -> None:
    assert OutboundTlsSettings().storage_io_properties() == {}
    ca = str(MeshFiles.create(tmp_path).ca_bundle)
    settings = OutboundTlsSettings(storage_ca_file=ca)
    assert settings.storage_io_properties() == {S3_CA_BUNDLE: ca}
    with pytest.raises(ConfigError, match="STORAGE_CA_FILE"):
        OutboundTlsSettings(storage_ca_file=str(tmp_path / "none.pem")).storage_io_properties()


def _loaded_subjects(context: ssl.SSLContext) -> list[object]:
    return [cert["subject"] for cert in context.get_ca_certs()]


def test_database_verify_full_checks_name_and_chain(tmp_path: Path) -> None:
    mesh = MeshFiles.create(tmp_path)
    url = "postgresql://registry@db.example:5432/registry"
    context = database_ssl(url, "verify-full", str(mesh.ca_bundle))
    assert context is not None
    assert context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert ((("commonName", "texera-lake mesh CA"),),) in _loaded_subjects(context)


def test_database_verify_full_from_the_url_with_its_root_certificate(tmp_path: Path) -> None:
    mesh = MeshFiles.create(tmp_path)
    url = f"postgresql://registry@db.example/registry?sslmode=verify-full&sslrootcert={mesh.ca_bundle}"
    context = database_ssl(url, "", "")
    assert context is not None
    assert context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert ((("commonName", "texera-lake mesh CA"),),) in _loaded_subjects(context)


def test_database_tls_stays_as_the_url_says_by_default() -> None:
    assert database_ssl("postgresql://registry@localhost/registry", "", "") is None
    assert database_ssl("postgresql://r@localhost/r?sslmode=disable", "", "") is None


def test_database_tls_unverified_is_explicit_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    context = database_ssl("postgresql://r@localhost/r", "require-unverified", "")
    assert context is not None
    assert context.verify_mode == ssl.CERT_NONE
    assert any("NOT verified" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="unknown database TLS mode"):
        database_ssl("postgresql://r@localhost/r", "verify-ca", "")


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
async def test_pyiceberg_rest_catalog_without_verification(https_catalog: HttpsCatalog) -> None:
    """False is kept although REQUESTS_CA_BUNDLE would override a session's verify."""
    factory = CatalogFactory(catalog_trust=ServerTrust(verify=False))
    catalog = await asyncio.to_thread(factory.build, _rest_binding(https_catalog.url))
    assert catalog.properties["prefix"] == "the-prefix"

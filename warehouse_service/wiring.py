"""What the registry is built from, made from its settings: its client of the catalog (with its
OAuth2 clients), TLS to its database, and the issuer of units' certificates."""

from __future__ import annotations

import datetime
import ssl

from warehouse_service.catalog import delete_profile
from warehouse_service.catalog.catalog_client import CatalogClient
from warehouse_service.catalog.catalog_oauth import OAuthClient
from warehouse_service.settings import WarehouseServiceSettings
from warehouse_service.store.db_tls import database_ssl
from warehouse_service.units.unit_certificates import UnitCertificates


def catalog_client(settings: WarehouseServiceSettings) -> CatalogClient:
    """The registry's client of the catalog (open() it before use)."""
    return CatalogClient(
        settings.catalog_management_uri,
        settings.catalog_uri,
        settings.catalog_project_id,
        timeout_seconds=settings.catalog_timeout_seconds,
        attempts=settings.catalog_attempts,
        oauth=_oauth_client(settings, settings.catalog_client_id, settings.catalog_client_secret),
        reader=_oauth_client(
            settings, settings.catalog_reader_client_id, settings.catalog_reader_client_secret
        ),
        trust=settings.catalog_trust(),
        delete_profile=delete_profile.parse(settings.catalog_delete_profile),
    )


def _oauth_client(
    settings: WarehouseServiceSettings, client_id: str, secret: str
) -> OAuthClient | None:
    """One OAuth2 client of the catalog; None without its secret (the catalog takes none)."""
    if not client_id or not secret:
        return None
    return OAuthClient(
        settings.catalog_token_uri,
        client_id,
        secret,
        scope=settings.catalog_oauth_scope,
        audience=settings.catalog_oauth_audience,
        warehouse_scope=settings.catalog_warehouse_token_scope,
    )


def database_ssl_context(settings: WarehouseServiceSettings) -> ssl.SSLContext | None:
    """TLS to the registry's database (warehouse_service.store.db_tls)."""
    return database_ssl(settings.database_url, settings.database_tls, settings.database_ca_file)


def unit_certificates(settings: WarehouseServiceSettings) -> UnitCertificates | None:
    """The issuer of units' certificates; None when units serve plaintext."""
    if not settings.unit_issuer_certificate:
        return None
    return UnitCertificates.from_files(
        settings.unit_issuer_certificate,
        settings.unit_issuer_key,
        datetime.timedelta(seconds=settings.unit_certificate_seconds),
    )

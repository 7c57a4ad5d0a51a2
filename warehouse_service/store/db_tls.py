"""TLS to the registry's PostgreSQL: verify-full against a CA bundle when asked for.

The setting (TEXERA_LAKE_WAREHOUSE_DATABASE_TLS) or the URL's `sslmode` asks:
- `verify-full`: the server's certificate must chain to the CA bundle (the URL's `sslrootcert`,
  else TEXERA_LAKE_WAREHOUSE_DATABASE_CA_FILE, else the system's trust store) and name the host;
- `require-unverified` (the setting only): encrypted, any certificate accepted, logged as a
  WARNING at start;
- empty (the default): as the URL says, asyncpg's own handling (its default is `prefer`).
"""

from __future__ import annotations

import ssl
from urllib.parse import parse_qs, urlsplit

from service_runtime.outbound_tls import ServerTrust
from warehouse_service.settings import DATABASE_TLS_MODES, REQUIRE_UNVERIFIED, VERIFY_FULL


def _query(url: str, name: str) -> str:
    values = parse_qs(urlsplit(url).query).get(name, [""])
    return values[-1]


def database_ssl(url: str, mode: str, ca_file: str) -> ssl.SSLContext | None:
    """The SSL context the pool connects with; None leaves it to asyncpg and the URL."""
    if mode not in DATABASE_TLS_MODES:
        raise ValueError(f"unknown database TLS mode {mode!r}")
    if mode == REQUIRE_UNVERIFIED:
        trust = ServerTrust(verify=False)
        trust.warn_if_unverified("the registry's database", "TEXERA_LAKE_WAREHOUSE_DATABASE_TLS")
        return trust.ssl_context()
    if mode == VERIFY_FULL or _query(url, "sslmode") == VERIFY_FULL:
        return ServerTrust(_query(url, "sslrootcert") or ca_file).ssl_context()
    return None

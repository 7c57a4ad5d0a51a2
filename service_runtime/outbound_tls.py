"""How a client verifies the servers it calls over TLS (the catalog, object storage, the
registry's database).

A server's certificate is checked against a CA bundle (a PEM file), or against the default
trust store when none is given, and its name against the host called. Turning verification off
is an explicit choice, said once at start as a WARNING (unverified_warning), never silently.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass

log = logging.getLogger("service_runtime.outbound_tls")


@dataclass(frozen=True)
class ServerTrust:
    """Whom a client trusts: the CAs in ca_file (empty: the default trust store); verify=False
    accepts any certificate (still encrypted, never authenticated)."""

    ca_file: str = ""
    verify: bool = True

    def ssl_context(self) -> ssl.SSLContext:
        """A client context (TLS 1.2 or later) that checks the server's certificate and name."""
        context = ssl.create_default_context(cafile=self.ca_file or None)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        if not self.verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context

    def requests_verify(self) -> bool | str:
        """The `verify` argument of requests (and of pyiceberg's REST client): the CA bundle,
        True for requests' default trust store, or False when verification is off."""
        if not self.verify:
            return False
        return self.ca_file or True

    def warn_if_unverified(self, what: str, setting: str) -> None:
        """Logs a WARNING when verification of what is off (call at start)."""
        if not self.verify:
            log.warning(
                "TLS certificates of %s are NOT verified (%s=false): anyone on the path can "
                "impersonate it",
                what,
                setting,
            )


#: Verification against the default trust store.
DEFAULT_TRUST = ServerTrust()

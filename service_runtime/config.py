"""Settings read from environment variables.

Every setting is one variable named ``TEXERA_LAKE_<NAME>``. A setting declared
as *scoped* is read per service: ``TEXERA_LAKE_<SCOPE>_<NAME>`` (for example
``TEXERA_LAKE_GATEWAY_PORT``), so that one environment can configure the whole
mesh. Defaults are those of the embedded stack on one machine. Any setting may
instead be given in a file named by ``<variable>_FILE`` (as Docker and Kubernetes
mount them); a setting marked secret only so, from a file nobody but its owner (and its
group, as Kubernetes mounts secrets) can read, nor anybody else write.

A setting declared *secret* may instead be given as a file: ``<variable>_FILE``
names a file holding the value (for example ``TEXERA_LAKE_JWT_SECRET_FILE``), so
that the secret need not be in the process's environment. A setting declared
*as_file* is given only so and holds the file's path, not its content: its user
reads the file itself, and again when it changes (a certificate rotated in place).

``scripts/settings_table.py`` prints every setting of the mesh as the Markdown
table of docs/configuration.md.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from service_runtime.tls.identity import AllowedPeers

ENV_PREFIX = "TEXERA_LAKE_"
MIN_SECRET_LENGTH = 32


class ConfigError(Exception):
    """A setting is missing or malformed; the message names the variable."""


def setting(
    name: str,
    default: Any,
    help: str,
    *,
    secret: bool = False,
    scoped: bool = False,
    as_file: bool = False,
) -> Any:
    """Declares a settings field read from ``TEXERA_LAKE_[<SCOPE>_]<name>``; as_file: given
    only as ``<variable>_FILE``, whose path the field holds (the file is checked at start)."""
    return field(
        default=default,
        metadata={
            "env": name,
            "help": help,
            "secret": secret,
            "scoped": scoped,
            "as_file": as_file,
        },
    )


def page_token_key_setting() -> Any:
    """The secret that signs a service's page tokens; every replica must share it."""
    return setting(
        "PAGE_TOKEN_KEY",
        "",
        "Key that signs this service's page tokens (at least 32 characters; the same for every "
        "replica). Required.",
        secret=True,
        scoped=True,
    )


def _parse(kind: Any, raw: str) -> Any:
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered in {"1", "true", "yes", "on"}:
            return True
        if lowered in {"0", "false", "no", "off"}:
            return False
        raise ValueError("expected true or false")
    if kind is int:
        return int(raw)
    if kind is float:
        return float(raw)
    return raw


def read_setting_file(path: str, name: str, *, secret: bool) -> bytes:
    """The content of the file at path that gives the setting called name (its ``_FILE``
    variable); a secret only from a file others may neither read nor write. Raises ValueError
    naming the setting, never showing the content."""
    try:
        with open(path, "rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            content = file.read()
    except OSError as exc:
        raise ValueError(f"cannot read {name} ({path}): {exc.strerror}") from exc
    # Group read is allowed: Kubernetes mounts secret files 0440 for the pod's group.
    if secret and mode & 0o027:
        raise ValueError(
            f"{name} ({path}) may be read by others (mode {mode & 0o777:o}); "
            "make it readable by its owner only (chmod 600)"
        )
    return content


def _from_file(env: Mapping[str, str], variable: str, *, secret: bool) -> str | None:
    """The content of the file named by ``<variable>_FILE``, if set. A secret is taken only
    so, from a file only its owner may read: the environment is no place for a secret
    (children inherit it, and ``/proc/<pid>/environ`` keeps it for the process's life)."""
    if secret and variable in env:
        raise ValueError(
            f"secrets are not taken from the environment; put it in a file "
            f"readable only by this process's user and set {variable}_FILE"
        )
    path = env.get(f"{variable}_FILE")
    if not path:
        return None
    return read_setting_file(path, f"{variable}_FILE", secret=secret).decode().strip()


def _file_path(env: Mapping[str, str], variable: str, *, secret: bool) -> str | None:
    """The path named by ``<variable>_FILE`` of an as_file setting, once its file could be
    read (as a secret's, if it is one)."""
    if variable in env:
        raise ValueError(f"this setting is read from a file only; set {variable}_FILE")
    path = env.get(f"{variable}_FILE")
    if path:
        read_setting_file(path, f"{variable}_FILE", secret=secret)
    return path


@dataclass(frozen=True)
class Settings:
    """Base of every settings class; subclasses declare fields with setting()."""

    #: Scope of scoped settings (for example ``GATEWAY``); set by subclasses.
    scope: typing.ClassVar[str] = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Self:
        env = os.environ if environ is None else environ
        hints = typing.get_type_hints(cls)
        values: dict[str, Any] = {}
        errors: list[str] = []
        for f in dataclasses.fields(cls):
            variable = cls.variable_name(f)
            try:
                if f.metadata["as_file"]:
                    path = _file_path(env, variable, secret=f.metadata["secret"])
                    if path:
                        values[f.name] = path
                    continue
                raw = _from_file(env, variable, secret=f.metadata["secret"])
                if raw is None and not f.metadata["secret"]:
                    raw = env.get(variable)
                if raw is not None:
                    values[f.name] = _parse(hints[f.name], raw)
            except ValueError as exc:
                errors.append(f"{variable}: {exc}")
        if errors:
            raise ConfigError("invalid settings: " + "; ".join(errors))
        return cls(**values)

    @classmethod
    def variable_name(cls, f: dataclasses.Field[Any]) -> str:
        scope = f"{cls.scope}_" if f.metadata["scoped"] and cls.scope else ""
        return f"{ENV_PREFIX}{scope}{f.metadata['env']}"

    @classmethod
    def variable_of(cls, attribute: str) -> str:
        """The environment variable that sets a field, by its attribute name: the ``_FILE``
        variable of a setting given as a file."""
        [f] = [f for f in dataclasses.fields(cls) if f.name == attribute]
        given_as_file = f.metadata["secret"] or f.metadata["as_file"]
        return cls.variable_name(f) + ("_FILE" if given_as_file else "")

    @classmethod
    def secret_file_variables(cls) -> list[str]:
        """The ``_FILE`` variables that name the files of the settings marked secret."""
        return [
            f"{cls.variable_name(f)}_FILE" for f in dataclasses.fields(cls) if f.metadata["secret"]
        ]

    @classmethod
    def describe(cls) -> Iterator[tuple[str, str, str]]:
        """Yields (variable, default, help) for every setting."""
        for f in dataclasses.fields(cls):
            if f.metadata["secret"] or f.metadata["as_file"]:
                yield f"{cls.variable_name(f)}_FILE", "", f"File holding it: {f.metadata['help']}"
            else:
                yield cls.variable_name(f), str(f.default), f.metadata["help"]

    def require(self, attribute: str) -> None:
        """Raises ConfigError naming the variable when a setting is empty."""
        if not getattr(self, attribute):
            f = next(f for f in dataclasses.fields(self) if f.name == attribute)
            raise ConfigError(f"{self.variable_of(attribute)} must be set: {f.metadata['help']}")

    def __repr__(self) -> str:
        shown = (
            f"{f.name}={'***' if f.metadata['secret'] else repr(getattr(self, f.name))}"
            for f in dataclasses.fields(self)
        )
        return f"{type(self).__name__}({', '.join(shown)})"


@dataclass(frozen=True, repr=False)
class ServerSettings(Settings):
    """Settings every service process has."""

    #: Whether serving plaintext takes PLAINTEXT=true (a computing unit serves what the
    #: registry launched it with: a certificate of its own when the registry issues them).
    plaintext_is_explicit: typing.ClassVar[bool] = True

    host: str = setting("HOST", "127.0.0.1", "Address the servers bind to.")
    port: int = setting("PORT", 0, "gRPC port of the service.", scoped=True)
    metrics_port: int = setting(
        "METRICS_PORT", 0, "Port of the Prometheus /metrics endpoint; 0 turns it off.", scoped=True
    )
    metrics_token: str = setting(
        "METRICS_TOKEN",
        "",
        "Bearer token /metrics requires (at least 32 characters; Prometheus sends it from "
        "`authorization: {credentials_file: ...}`). Empty: /metrics answers anyone, but "
        "without the figures that name a warehouse.",
        secret=True,
        scoped=True,
    )
    log_level: str = setting("LOG_LEVEL", "INFO", "Log level: DEBUG logs every request, redacted.")
    shutdown_grace_seconds: float = setting(
        "SHUTDOWN_GRACE_SECONDS", 10.0, "On SIGTERM, how long in-flight calls may take to finish."
    )
    gateway_public_key: str = setting(
        "GATEWAY_PUBLIC_KEY",
        "",
        "Ed25519 public key (its 32 bytes in base64) that verifies the internal tokens the "
        "gateway issues. Required by every service but the gateway.",
    )
    trace_otlp_endpoint: str = setting(
        "TRACE_OTLP_ENDPOINT",
        "",
        "OpenTelemetry collector (OTLP over gRPC, for example http://collector:4317) that the "
        "service sends its trace spans to; empty sends none.",
    )
    trace_console: bool = setting(
        "TRACE_CONSOLE",
        False,
        "Write each finished trace span as a JSON line to standard error (the service's log).",
    )
    registry_public_key: str = setting(
        "REGISTRY_PUBLIC_KEY",
        "",
        "Ed25519 public key (its 32 bytes in base64) that verifies the credentials the registry "
        "issues to computing units. Required by the registry.",
    )

    tls_certificate: str = setting(
        "TLS_CERTIFICATE",
        "",
        "the PEM certificate chain (its own certificate first) this service serves TLS with, "
        "read again whenever the file changes. Empty: the service serves plaintext.",
        scoped=True,
        as_file=True,
    )
    plaintext: bool = setting(
        "PLAINTEXT",
        False,
        "Serve plaintext, without TLS: for debugging only, logged as a WARNING at start. A "
        "service given no TLS certificate refuses to start unless this is true.",
        scoped=True,
    )
    tls_key: str = setting(
        "TLS_KEY",
        "",
        "the unencrypted PEM private key of the TLS certificate, read again with it. "
        "Required with a certificate.",
        secret=True,
        scoped=True,
        as_file=True,
    )
    tls_client_ca: str = setting(
        "TLS_CLIENT_CA",
        "",
        "the PEM certificates of the CAs that clients' certificates must chain to (mutual "
        "TLS); used only when client certificates are required.",
        scoped=True,
        as_file=True,
    )
    tls_require_client_certificate: bool = setting(
        "TLS_REQUIRE_CLIENT_CERTIFICATE",
        False,
        "Mutual TLS: refuse, in the TLS handshake, a client without a valid certificate from "
        "the client CAs. Needs a TLS certificate and client CAs.",
        scoped=True,
    )
    tls_allowed_peers: str = setting(
        "TLS_ALLOWED_PEERS",
        "",
        "Comma-separated SPIFFE IDs of the client certificates whose calls this service takes "
        "(one ending in /* takes every ID below it: spiffe://texera-lake/unit/*); health checks "
        "are exempt. Empty: every client the TLS handshake admits. Needs client certificates "
        "to be required.",
        scoped=True,
    )

    tls_ca_bundle: str = setting(
        "TLS_CA_BUNDLE",
        "",
        "the PEM certificates of the CAs that the servers this service calls (the mesh's "
        "services and computing units) must chain to, their names matching the host called. "
        "Empty: this service calls the mesh in plaintext.",
        scoped=True,
        as_file=True,
    )
    tls_client_certificate: str = setting(
        "TLS_CLIENT_CERTIFICATE",
        "",
        "the PEM certificate chain this service presents when it calls the mesh (mutual TLS). "
        "Empty: the TLS certificate it serves with, if any. Needs a CA bundle.",
        scoped=True,
        as_file=True,
    )
    tls_client_key: str = setting(
        "TLS_CLIENT_KEY",
        "",
        "the unencrypted PEM private key of the client certificate. Empty: the TLS key it "
        "serves with, if the client certificate is empty too.",
        secret=True,
        scoped=True,
        as_file=True,
    )

    @property
    def client_certificate(self) -> tuple[str, str]:
        """The certificate chain and key files this service presents when it calls the mesh:
        its own client certificate if set, else the one it serves with; empty for none."""
        if self.tls_client_certificate:
            return self.tls_client_certificate, self.tls_client_key
        return self.tls_certificate, self.tls_key

    @property
    def allowed_peers(self) -> AllowedPeers:
        """The peers this service takes calls from; empty when any client may call."""
        try:
            return AllowedPeers.parse(self.tls_allowed_peers)
        except ValueError as exc:
            raise ConfigError(f"{self.variable_of('tls_allowed_peers')}: {exc}") from exc

    def validate(self) -> None:
        """Raises ConfigError, naming the variable, for settings a service cannot run with."""
        if self.log_level.upper() not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ConfigError(
                f"{ENV_PREFIX}LOG_LEVEL must be DEBUG, INFO, WARNING, ERROR or CRITICAL"
            )
        if self.metrics_token:
            self.require_secret_length("metrics_token")
        self._validate_tls()
        self._validate_client_tls()

    def _validate_client_tls(self) -> None:
        """Settings of the calls this service makes to the mesh that make sense together."""
        variable = self.variable_of
        if bool(self.tls_client_certificate) != bool(self.tls_client_key):
            given, missing = (
                ("tls_client_certificate", "tls_client_key")
                if self.tls_client_certificate
                else ("tls_client_key", "tls_client_certificate")
            )
            raise ConfigError(f"{variable(given)} is set but not {variable(missing)}")
        if self.tls_client_certificate and not self.tls_ca_bundle:
            raise ConfigError(
                f"{variable('tls_client_certificate')} is used only with {variable('tls_ca_bundle')}"
            )

    def _validate_tls(self) -> None:
        """TLS settings that make sense together; none at all is plaintext."""
        variable = self.variable_of
        if not self.tls_certificate:
            given = [
                attribute
                for attribute in (
                    "tls_key",
                    "tls_client_ca",
                    "tls_require_client_certificate",
                    "tls_allowed_peers",
                )
                if getattr(self, attribute)
            ]
            if given:
                raise ConfigError(
                    f"{variable(given[0])} is set but not {variable('tls_certificate')}"
                )
            if self.plaintext_is_explicit and not self.plaintext:
                raise ConfigError(
                    f"{variable('tls_certificate')} is not set: give the service a TLS "
                    f"certificate, or set {variable('plaintext')}=true to serve plaintext "
                    "(for debugging only)"
                )
            return
        if self.plaintext:
            raise ConfigError(
                f"{variable('plaintext')}=true and {variable('tls_certificate')} say opposite things"
            )
        self.require("tls_key")
        requires = variable("tls_require_client_certificate")
        if self.tls_require_client_certificate:
            self.require("tls_client_ca")
        elif self.tls_client_ca:
            # Without it gRPC asks clients for no certificate: the CAs would check nothing.
            raise ConfigError(f"{variable('tls_client_ca')} is used only with {requires}=true")
        if self.allowed_peers and not self.tls_require_client_certificate:
            raise ConfigError(
                f"{variable('tls_allowed_peers')} needs {requires}=true: peers are known by "
                "their client certificates"
            )

    def require_secret_length(self, attribute: str) -> None:
        """Raises ConfigError naming the variable when a secret is empty or too short."""
        self.require(attribute)
        if len(getattr(self, attribute)) < MIN_SECRET_LENGTH:
            f = next(f for f in dataclasses.fields(self) if f.name == attribute)
            raise ConfigError(
                f"{self.variable_name(f)}_FILE must hold at least {MIN_SECRET_LENGTH} characters"
            )


def markdown_table(*settings_classes: type[Settings]) -> str:
    """The settings of the given classes as one Markdown table, each variable once."""
    rows = ["| variable | default | meaning |", "| --- | --- | --- |"]
    seen: set[str] = set()
    for cls in settings_classes:
        for variable, default, help_text in cls.describe():
            if variable not in seen:
                seen.add(variable)
                shown = f"`{default}`" if default else "(empty)"
                rows.append(f"| `{variable}` | {shown} | {help_text} |")
    return "\n".join(rows)

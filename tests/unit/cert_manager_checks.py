"""JSON schemas of the cert-manager objects deploy/kubernetes/ uses, for the fields it uses.

kubernetes-validate knows the Kubernetes API only, not custom resources, so cert-manager's
Issuer and Certificate (cert-manager.io/v1) are checked against these instead: written after
cert-manager's CRDs (v1.17), closed (a field not listed here, a misspelt one say, is an
error), and naming the values cert-manager accepts where it lists them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jsonschema

API_VERSION = "cert-manager.io/v1"
_STRINGS = {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1}
#: A Go duration as cert-manager takes it (720h, 90m, 2160h0m0s).
_DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(h|m|s|ms))+$"}
_KEY_USAGES = [
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
]


def _closed(properties: dict[str, Any], *required: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(required),
        "additionalProperties": False,
    }


_METADATA = _closed(
    {
        "name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        "namespace": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "name",
    "namespace",
)
_NAME_CONSTRAINT_ITEM = _closed(
    {
        "dnsDomains": _STRINGS,
        "ipRanges": _STRINGS,
        "emailAddresses": _STRINGS,
        "uriDomains": _STRINGS,
    }
)
_CERTIFICATE_SPEC = _closed(
    {
        "secretName": {"type": "string"},
        "issuerRef": _closed(
            {
                "name": {"type": "string"},
                "kind": {"enum": ["Issuer", "ClusterIssuer"]},
                "group": {"const": "cert-manager.io"},
            },
            "name",
        ),
        "isCA": {"type": "boolean"},
        "commonName": {"type": "string", "maxLength": 64},
        "duration": _DURATION,
        "renewBefore": _DURATION,
        "privateKey": _closed(
            {
                "algorithm": {"enum": ["RSA", "ECDSA", "Ed25519"]},
                "size": {"type": "integer"},
                "encoding": {"enum": ["PKCS1", "PKCS8"]},
                "rotationPolicy": {"enum": ["Never", "Always"]},
            }
        ),
        "usages": {"type": "array", "items": {"enum": _KEY_USAGES}},
        "uris": _STRINGS,
        "dnsNames": _STRINGS,
        "ipAddresses": _STRINGS,
        "nameConstraints": _closed(
            {
                "critical": {"type": "boolean"},
                "permitted": _NAME_CONSTRAINT_ITEM,
                "excluded": _NAME_CONSTRAINT_ITEM,
            }
        ),
    },
    "secretName",
    "issuerRef",
)
_ISSUER_SPEC = {
    "oneOf": [
        _closed({"selfSigned": _closed({})}, "selfSigned"),
        _closed({"ca": _closed({"secretName": {"type": "string"}}, "secretName")}, "ca"),
    ]
}


def _object(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    return _closed(
        {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": kind},
            "metadata": _METADATA,
            "spec": spec,
        },
        "apiVersion",
        "kind",
        "metadata",
        "spec",
    )


SCHEMAS = {
    "Issuer": _object("Issuer", _ISSUER_SPEC),
    "Certificate": _object("Certificate", _CERTIFICATE_SPEC),
}


def problems(document: Mapping[str, Any]) -> list[str]:
    """What keeps a cert-manager object from fitting its schema (none: it fits)."""
    schema = SCHEMAS.get(str(document.get("kind")))
    if schema is None:
        return [f"no schema for cert-manager kind {document.get('kind')!r}"]
    validator = jsonschema.Draft202012Validator(schema)
    return [
        f"{'/'.join(map(str, error.path))}: {error.message}"
        for error in validator.iter_errors(document)
    ]

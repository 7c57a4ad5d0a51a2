"""Storage credentials at rest: encrypted with a key derived from the configured secret."""

from __future__ import annotations

import base64
import json

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_CONTEXT = b"texera-lake dev catalog storage credentials"


class CredentialCipher:
    """Authenticated encryption (Fernet: AES-128-CBC with HMAC-SHA256) of credential records."""

    def __init__(self, secret: str) -> None:
        if len(secret) < 16:
            raise ValueError("the encryption key must be at least 16 characters")
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_CONTEXT).derive(
            secret.encode()
        )
        self._fernet = Fernet(base64.urlsafe_b64encode(key))

    def seal(self, record: dict[str, str]) -> bytes:
        return self._fernet.encrypt(json.dumps(record).encode())

    def open(self, sealed: bytes) -> dict[str, str]:
        try:
            record: dict[str, str] = json.loads(self._fernet.decrypt(sealed))
        except InvalidToken as exc:
            raise ValueError(
                "stored credentials cannot be decrypted with the configured key"
            ) from exc
        return record

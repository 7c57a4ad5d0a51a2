"""Files of the embedded stack's state folder that programs besides the stack read (the
command line finds the running stack and its development secrets through them); light to
import: no server of the stack comes with it."""

from __future__ import annotations

#: The endpoints of the running stack, as JSON (written by the stack at each start).
ENDPOINTS_FILE = "stack.json"
#: The development secret the stack's gateway verifies users' tokens with.
JWT_SECRET_FILE = "jwt-secret"  # noqa: S105 - a file name, not a secret
#: The S3 endpoint's admin key, which provisions users' buckets.
S3_ADMIN_KEY_FILE = "s3-admin-key"

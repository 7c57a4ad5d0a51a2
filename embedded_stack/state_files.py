"""Files of the embedded stack's state folder that programs besides the stack read (the
command line finds the running stack through them); light to import: no server of the stack
comes with it."""

from __future__ import annotations

#: The endpoints of the running stack, as JSON (written by Stack._write_endpoints).
ENDPOINTS_FILE = "stack.json"

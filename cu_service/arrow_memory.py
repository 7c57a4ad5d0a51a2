"""Arrow's allocator in a unit's processes, chosen before anything imports pyarrow.

pyarrow picks the allocator behind Arrow's default memory pool once, when it is first imported
(``ARROW_DEFAULT_MEMORY_POOL``). Its own default, mimalloc, keeps the memory a thread freed for
that thread to reuse and hands it back to the system only when that same thread allocates or
collects again. A unit's driver reads and writes table metadata and telemetry through Arrow's
S3 filesystem, whose transfer buffers Arrow allocates from that pool whatever pyarrow's
``set_memory_pool`` says; the threads that did so then sit idle with the unit, and so did some
35 MiB of freed buffers. jemalloc, which pyarrow's wheels carry too, hands freed memory back
within seconds from a thread of its own. An operator's choice of the variable wins; a pyarrow
built without jemalloc warns once and keeps its default.
"""

from __future__ import annotations

import os

#: The variable pyarrow reads, and the allocator a unit uses unless it is set.
VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
ALLOCATOR = "jemalloc"

os.environ.setdefault(VARIABLE, ALLOCATOR)

"""How much memory a computing unit may hold in all, whichever launcher runs it.

A unit's ``memory_mib`` is its Spark driver's heap. Beside the heap the unit holds the JVM's
memory outside it, its Python side (the driver's process, pyspark's worker daemon) and, for
each core, the Python worker of a running task with the task's scratch file systems (memory
file systems, counted as the task's memory). Both launchers bound a unit by the same figure:
a Pod's memory request and limit, and the process launcher's cgroup of the unit; the unit is
told it (``TEXERA_LAKE_CU_MEMORY_BUDGET_BYTES``) to size its tasks' scratch file systems.
"""

from __future__ import annotations

#: The JVM's memory beyond its heap: Spark's own rule, 10% and at least 384 MiB.
JVM_OVERHEAD_MIB = 384
#: The unit's Python side besides its tasks' workers (gRPC server, Arrow buffers, pyspark's
#: worker daemon with the modules tasks import).
PYTHON_MIB = 512
#: A running task's Python worker and its scratch file systems: one task per core at once.
TASK_MIB = 512
#: The least heap Spark's driver starts with (Spark refuses less than some 450 MiB).
MIN_HEAP_MIB = 512
MIB = 1024 * 1024


def unit_memory_mib(cores: int, memory_mib: int) -> int:
    """All a unit of cores and a heap of memory_mib may hold, in MiB."""
    return memory_mib + max(JVM_OVERHEAD_MIB, memory_mib // 10) + PYTHON_MIB + TASK_MIB * cores


def unit_memory_bytes(cores: int, memory_mib: int) -> int:
    """unit_memory_mib in bytes."""
    return unit_memory_mib(cores, memory_mib) * MIB

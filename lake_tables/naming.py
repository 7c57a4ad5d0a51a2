"""Where an execution's tables live: deterministic, sanitized names and their properties.

Per warehouse, results go to namespace `results` (one table per execution and
materialized operator), statistics to `runtime_stats` and console messages to
`console_logs` (one table per execution each). Names are lowercase letters,
digits and '_', and end with a digest of the ids, so two ids that sanitize
alike still get different tables.
"""

from __future__ import annotations

import hashlib
import re

RESULTS = "results"
RUNTIME_STATS = "runtime_stats"
CONSOLE_LOGS = "console_logs"
NAMESPACES = (RESULTS, RUNTIME_STATS, CONSOLE_LOGS)

EXECUTION_ID = "texera.execution-id"
WORKFLOW_ID = "texera.workflow-id"
OPERATOR_ID = "texera.operator-id"
OUTPUT_PORT = "texera.output-port"
COMPUTING_UNIT_ID = "texera.computing-unit-id"
#: In a snapshot's summary: which of its execution's commits to the table it is (1, 2, ...).
COMMIT_SEQUENCE = "texera.commit-sequence"


def _slug(text: str) -> str:
    return re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", text.lower())).strip("_")[:40] or "x"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:8]


def result_table(execution_id: str, operator_id: str) -> str:
    return f"{result_table_prefix(execution_id)}{_slug(operator_id)}_{_digest(execution_id, operator_id)}"


def result_table_prefix(execution_id: str) -> str:
    """How every result table of the execution is named first (other executions' ids may
    sanitize alike: their tables' properties tell them apart)."""
    return f"{_slug(execution_id)}__"


def execution_table(execution_id: str) -> str:
    """The name of an execution's runtime_stats and console_logs tables."""
    return f"{_slug(execution_id)}_{_digest(execution_id)}"


def is_execution_table(execution_id: str, namespace: str, name: str) -> bool:
    """Whether namespace.name is named as one of the execution's tables (its properties must
    still say so: another id may sanitize alike)."""
    if namespace == RESULTS:
        return name.startswith(result_table_prefix(execution_id))
    return namespace in (RUNTIME_STATS, CONSOLE_LOGS) and name == execution_table(execution_id)

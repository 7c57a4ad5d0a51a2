"""Table names are deterministic, sanitized and distinct per (execution, operator)."""

from __future__ import annotations

import re

from lake_tables.naming import execution_table, result_table, result_table_prefix


def test_names_are_deterministic_and_sanitized() -> None:
    name = result_table("Exec-42", "Op.1/x")
    assert name == result_table("Exec-42", "Op.1/x")
    assert re.fullmatch(r"[a-z0-9_]+", name)
    assert name.startswith("exec_42__op_1_x_")


def test_ids_that_sanitize_alike_still_get_different_tables() -> None:
    assert result_table("a-b", "op") != result_table("a_b", "op")
    assert result_table("x", "Op") != result_table("x", "op")
    assert execution_table("A") != execution_table("a")


def test_every_result_table_of_an_execution_starts_with_its_prefix() -> None:
    for operator_id in ("op", "Op.1/x", "z" * 64):
        assert result_table("Exec-42", operator_id).startswith(result_table_prefix("Exec-42"))
    assert not result_table("Exec-420", "op").startswith(result_table_prefix("Exec-42"))

"""What maintenance may remove, and which retention policies are accepted."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask

from lake_tables.orphans import expiry_commit, object_key, orphans, superseded_snapshots
from service_runtime.errors import ServiceError
from texera.lake.v1 import retention_service_pb2 as rs
from warehouse_service.api.retention import check_policy

WAREHOUSE = "0191b7c2-2e1c-7d1a-9b0e-3f7c2a1d4e5f"


def test_only_unreferenced_files_older_than_the_cutoff_are_orphans() -> None:
    listed = [
        ("b/t/data/old-orphan.parquet", 100.0),
        ("b/t/data/young-orphan.parquet", 200.0),  # a commit in flight may still add it
        ("b/t/data/referenced.parquet", 50.0),
        ("b/t/metadata/00001.metadata.json", 10.0),
    ]
    referenced = {"b/t/data/referenced.parquet", "b/t/metadata/00001.metadata.json"}
    assert orphans(listed, referenced, cutoff=150.0) == ["b/t/data/old-orphan.parquet"]
    assert orphans(listed, referenced, cutoff=99.0) == []


def test_locations_compare_as_the_file_system_lists_them() -> None:
    assert object_key("s3://b/t/data/f.parquet") == "b/t/data/f.parquet"
    assert object_key("s3a://b/t/f") == "b/t/f"
    assert object_key("b/t/f") == "b/t/f"


def _metadata(refs: dict[str, int]) -> dict[str, object]:
    return {
        "table-uuid": "u-1",
        "current-snapshot-id": 3,
        "snapshots": [{"snapshot-id": n} for n in (1, 2, 3, 4)],
        "refs": {name: {"snapshot-id": n, "type": "branch"} for name, n in refs.items()},
    }


def test_snapshots_that_no_branch_or_tag_points_at_are_superseded() -> None:
    assert superseded_snapshots(_metadata({"main": 3})) == [1, 2, 4]
    assert superseded_snapshots(_metadata({"main": 3, "audit": 1})) == [2, 4]
    assert superseded_snapshots({"snapshots": []}) == []


def test_the_expiry_commit_holds_only_while_the_table_did_not_move() -> None:
    commit = expiry_commit(_metadata({"main": 3}), [1, 2])
    assert commit["requirements"] == [
        {"type": "assert-table-uuid", "uuid": "u-1"},
        {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": 3},
    ]
    assert commit["updates"] == [{"action": "remove-snapshots", "snapshot-ids": [1, 2]}]


def _update(mask: tuple[str, ...] = (), **fields: object) -> rs.UpdateRetentionPolicyRequest:
    return rs.UpdateRetentionPolicyRequest(
        policy=rs.RetentionPolicy(warehouse_id=WAREHOUSE, **fields),  # type: ignore[arg-type]
        update_mask=FieldMask(paths=list(mask)),
    )


def test_a_valid_policy_names_the_fields_to_change() -> None:
    assert check_policy(_update(max_age=Duration(seconds=3600), keep_last=5)) == [
        "max_age",
        "keep_last",
    ]
    assert check_policy(_update(("keep_last",), keep_last=0)) == ["keep_last"]


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (_update(max_age=Duration(seconds=59)), "policy.max_age"),
        (_update(max_age=Duration(seconds=3600, nanos=1)), "policy.max_age"),
        (_update(max_age=Duration(seconds=-60)), "policy.max_age"),
        (_update(keep_last=-1), "policy.keep_last"),
        (_update(keep_last=100_001), "policy.keep_last"),
        (_update(("warehouse_id",)), "update_mask.paths[0]"),
        (
            rs.UpdateRetentionPolicyRequest(policy=rs.RetentionPolicy(warehouse_id="x")),
            "policy.warehouse_id",
        ),
    ],
)
def test_a_bad_policy_is_refused_naming_the_field(
    request_: rs.UpdateRetentionPolicyRequest, field: str
) -> None:
    with pytest.raises(ServiceError) as refused:
        check_policy(request_)
    assert refused.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in [violation.field for violation in refused.value.violations]

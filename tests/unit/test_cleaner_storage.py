"""The cleaner deletes with the vended credentials that cover the folder, and only those."""

from __future__ import annotations

from warehouse_service.catalog.vended import credentials_for

FOLDER = "s3://bucket/lake/t1/data/ex-1"


def _keyed(name: str) -> dict[str, str]:
    return {"s3.access-key-id": name, "s3.secret-access-key": "secret"}


def test_the_longest_storage_credential_prefix_that_covers_the_folder_wins() -> None:
    loaded = {
        "config": _keyed("config"),
        "storage-credentials": [
            {"prefix": "s3://bucket/lake", "config": _keyed("warehouse")},
            {"prefix": "s3://bucket/lake/t1", "config": _keyed("table")},
            {"prefix": "s3://bucket/lake/t2", "config": _keyed("other table")},
        ],
    }
    chosen = credentials_for(loaded, FOLDER)
    assert chosen is not None
    assert chosen["s3.access-key-id"] == "table"


def test_without_storage_credentials_the_tables_config_is_used() -> None:
    chosen = credentials_for({"config": _keyed("config")}, FOLDER)
    assert chosen is not None
    assert chosen["s3.access-key-id"] == "config"


def test_a_catalog_that_vends_no_key_gives_none() -> None:
    assert credentials_for({"config": {"s3.region": "x"}}, FOLDER) is None
    assert credentials_for({}, FOLDER) is None
    elsewhere = {"storage-credentials": [{"prefix": "s3://bucket/other", "config": _keyed("x")}]}
    assert credentials_for(elsewhere, FOLDER) is None

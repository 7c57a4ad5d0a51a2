"""The floor's Spark task, alone in a module that imports pyarrow only: every task runs in a
process of its own (cu_service.sandbox), which imports what the task's function needs, so the
floor must not carry the benchmark's own imports (the stack, boto3) into its tasks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs


@dataclass(frozen=True)
class Bucket:
    """Where the floor writes, and the key it writes with."""

    name: str
    region: str
    endpoint: str
    access_key_id: str
    secret_access_key: str


def write_plain_parquet(
    bucket: Bucket, prefix: str, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """One Parquet file per partition, straight to the bucket."""
    filesystem = fs.S3FileSystem(
        access_key=bucket.access_key_id,
        secret_key=bucket.secret_access_key,
        endpoint_override=bucket.endpoint,
        scheme="http",
        region=bucket.region,
    )
    path = f"{bucket.name}/{prefix}/{uuid.uuid4().hex}.parquet"
    writer = None
    rows = 0
    with filesystem.open_output_stream(path) as stream:
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(stream, batch.schema, compression="zstd")
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
    yield pa.RecordBatch.from_pydict({"rows": [rows]})

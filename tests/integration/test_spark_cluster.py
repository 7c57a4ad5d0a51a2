"""Computing units on a Spark standalone cluster: a master and two workers started with the
PySpark package's own `spark-class`, the registry's units pointed at the master through
TEXERA_LAKE_CU_SPARK_MASTER, and an execution whose tasks run on both workers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from embedded_stack.settings import StackSettings
from embedded_stack.spark_cluster import Cluster, standalone_cluster
from embedded_stack.stack import Stack
from tests.conftest import TEST_STACK_ENV
from tests.integration.executions import UnitClient, udf, workflow
from tests.integration.mesh import create_warehouse, user
from tests.integration.results import results_as
from texera.lake.v1 import execution_pb2, execution_service_pb2_grpc

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: Each task reports the executor it runs in, by the local folders its worker gave that
#: executor (a task's process sees no other process, so not by its parent).
WHERE_IT_RAN = udf(
    "import os, zlib\n"
    "import pyarrow as pa\n"
    "def process(batches):\n"
    "    executor = zlib.crc32(os.environ['SPARK_EXECUTOR_DIRS'].encode())\n"
    "    for batch in batches:\n"
    "        yield pa.RecordBatch.from_pydict({\n"
    "            'id': batch.column(0),\n"
    "            'daemon': pa.array([executor] * batch.num_rows, pa.int64()),\n"
    "        })\n",
    [("id", "bigint"), ("daemon", "bigint")],
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with standalone_cluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


@pytest.fixture(scope="module")
def cluster_stack(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    settings = StackSettings(state_dir=str(tmp_path_factory.mktemp("cluster-stack")))
    env = {
        **TEST_STACK_ENV,
        "TEXERA_LAKE_CU_SPARK_MASTER": cluster.master_url,
        "TEXERA_LAKE_CU_SPARK_AUTH_SECRET_FILE": str(cluster.secret_file),
    }
    with Stack(settings, ephemeral_ports=True, service_env=env) as running:
        yield running


def test_an_execution_runs_on_both_workers_of_the_cluster(
    cluster: Cluster, cluster_stack: Stack
) -> None:
    stack = cluster_stack
    warehouse = create_warehouse(user(stack, "clustered"), stack.provision_bucket("clustered"))
    unit = stack.unit_for("clustered")
    client = UnitClient(
        execution_service_pb2_grpc.ExecutionServiceStub(stack.unit_channel(unit)),
        stack.unit_call_metadata("clustered", unit.unit_id),
        unit.unit_id,
        "clustered",
    )
    flow = workflow(
        [
            {"operator_id": "n", "range_source": {"end": 4000, "partitions": 16}},
            {"operator_id": "where", "input_operator_ids": ["n"], "python_udf": WHERE_IT_RAN},
            {
                "operator_id": "per_daemon",
                "input_operator_ids": ["where"],
                "sql_query": {
                    "query": "SELECT daemon, count(*) AS c, sum(id) AS s FROM `where` GROUP BY daemon"
                },
                "materialize": True,
            },
        ]
    )
    submitted = client.submit(warehouse.warehouse_id, flow)
    final = client.finish(submitted.execution_id)
    assert final.state == execution_pb2.EXECUTION_STATE_SUCCEEDED, final.error

    rows, _ = results_as(stack, "clustered").all_rows(final.execution_id, "per_daemon")
    # Every row was seen once, by Python workers of two executors: one on each worker.
    assert sum(int(r["c"]) for r in rows) == 4000
    assert sum(int(r["s"]) for r in rows) == sum(range(4000))
    assert len(rows) >= 2
    # The unit's application holds a core of each worker: its executors are on both.
    assert cluster.application_of(unit.unit_id)["cores"] == 2
    assert all(w["coresused"] == 1 for w in cluster.alive_workers())

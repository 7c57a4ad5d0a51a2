"""A failure that is no operator's is summed up in one useful line."""

from __future__ import annotations

from pyiceberg.exceptions import ServerError

from cu_service.runner import _summary

PYTHON_WORKER_FAILURE = """An error occurred while calling o123.runJob.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed:
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/x/pyspark/worker.py", line 2100, in main
    process()
  File "/x/cu_service/workflow/iceberg_source.py", line 44, in read_tasks
    yield read.cast(spec.arrow_schema)
OverflowError: date value out of range

\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:600)
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
"""


def test_a_python_worker_failure_reads_as_the_python_exception() -> None:
    assert _summary(RuntimeError(PYTHON_WORKER_FAILURE)) == (
        "OverflowError: date value out of range"
    )


def test_other_failures_read_as_their_first_meaningful_line() -> None:
    assert _summary(RuntimeError("\n: \n  at x\n[CAST_INVALID_INPUT] bad cast\n")) == (
        "[CAST_INVALID_INPUT] bad cast"
    )


def test_a_failed_task_reads_as_sparks_own_error() -> None:
    text = (
        "Job aborted due to stage failure: Task 0 in stage 5.0 failed 1 times, most recent "
        "failure: Lost task 0.0 (TID 5): org.apache.spark.SparkNumberFormatException: "
        '[CAST_INVALID_INPUT] The value \'x\' of the type "STRING" cannot be cast to "INT".'
    )
    assert _summary(RuntimeError(text)).startswith("[CAST_INVALID_INPUT] The value 'x'")


def test_the_catalogs_error_names_its_type_and_message_without_credentials() -> None:
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJyZWdpc3RyeSJ9.c2lnbmF0dXJl"
    failure = ServerError(
        "DatabaseError: the catalog's database failed (OperationalError)\n"
        f"while serving Bearer {token}; client_secret=hunter2 " + "x" * 2000
    )
    summary = _summary(failure)
    assert summary.startswith(
        "the catalog answered with an error (ServerError): DatabaseError: the catalog's "
        "database failed (OperationalError) while serving Bearer "
    )
    assert token not in summary
    assert "hunter2" not in summary
    assert len(summary) == 1000

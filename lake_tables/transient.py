"""Which failures of a table operation pass by themselves: the catalog or storage briefly
unreachable or answering 5xx, as during a restart or a short outage of the database behind
them, and storage refusing vended credentials that expired (every attempt loads the table
again, which vends fresh ones). Other refusals (4xx), conflicts and bad data are not."""

from __future__ import annotations

import re
import sys

import requests
from pyiceberg.exceptions import (
    CommitStateUnknownException,
    ServerError,
    ServiceUnavailableError,
)

from service_runtime.retry import transient_connection_error

#: How the AWS SDK inside pyarrow reports storage that is unreachable or failing.
_STORAGE_OUTAGE = re.compile(
    r"NETWORK_CONNECTION|SERVICE_UNAVAILABLE|SLOW_DOWN|INTERNAL_FAILURE|REQUEST_TIMEOUT"
    r"|HTTP status 5\d\d|response code 5\d\d"
)
#: How S3 (and the AWS SDK inside pyarrow) reports temporary credentials that expired.
_EXPIRED_CREDENTIALS = re.compile(r"ExpiredToken|token has expired|TokenRefreshRequired")


def sql_database_unreachable(error: BaseException) -> bool:
    """Whether error is a SQL catalog's database that cannot be reached. SQLAlchemy is loaded
    only where a SQL catalog is made (lake_tables.pyiceberg_sql): not loaded, no such error."""
    errors = sys.modules.get("sqlalchemy.exc")
    return errors is not None and isinstance(error, errors.OperationalError)


def transient_table_failure(error: BaseException) -> bool:
    if isinstance(error, ServerError | ServiceUnavailableError | CommitStateUnknownException):
        return True  # the REST catalog answered 5xx (a commit's: its outcome is unknown)
    if isinstance(error, requests.ConnectionError | requests.Timeout):
        return True  # the REST catalog did not answer
    if sql_database_unreachable(error):
        return True
    if transient_connection_error(error):
        return True
    return isinstance(error, OSError) and (
        _STORAGE_OUTAGE.search(str(error)) is not None
        or _EXPIRED_CREDENTIALS.search(str(error)) is not None
    )

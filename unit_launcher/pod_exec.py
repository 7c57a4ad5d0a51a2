"""A command run in a unit's container through the API server's exec subresource.

The kubernetes client's ``stream`` replaces its ApiClient's request method while it runs,
so an exec given the launcher's own client would turn the launcher's other calls (on other
threads) into WebSocket calls: each exec gets an ApiClient of its own. The client speaks the
v5 channel protocol where the API server does and v4 otherwise; v4 cannot close standard
input, so what is written there ends with a newline and the command reads one line.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from kubernetes.stream.ws_client import WSClient
from websocket import WebSocketException

STDIN = 0


class ExecFailed(Exception):
    """The command could not be run, or did not end in time; the message says which."""


def run_in_pod(
    configuration: client.Configuration,
    namespace: str,
    pod: str,
    container: str,
    command: list[str],
    *,
    line: str | None = None,
    timeout_seconds: float,
) -> int:
    """Runs command in the container, writing line (if any) to its standard input; its exit
    status. Blocks: call it from a worker thread."""
    api_client = client.ApiClient(configuration)
    try:
        core = client.CoreV1Api(api_client)
        try:
            session = stream(
                core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                command=command,
                container=container,
                stdin=line is not None,
                stdout=False,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except ApiException as exc:
            raise ExecFailed(f"exec in Pod {pod} was refused: {str(exc.reason)[:200]}") from None
        try:
            if line is not None:
                session.write_stdin(line + "\n")
                session.close_channel(STDIN)  # v5: the end of input; v4: a no-op
            try:
                session.run_forever(timeout=timeout_seconds)
            except (OSError, WebSocketException):
                session.close()  # the connection broke: what came before it still counts
            if session.is_open():
                raise ExecFailed(f"{command[0]} in Pod {pod} ran over {timeout_seconds:g} s")
            return _exit_status(session, pod)
        finally:
            session.close()
    finally:
        api_client.close()


def _exit_status(session: WSClient, pod: str) -> int:
    try:
        code = session.returncode
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        raise ExecFailed(
            f"the API server's answer to an exec in Pod {pod} had no exit status"
        ) from None
    if code is None:
        raise ExecFailed(f"the exec in Pod {pod} ended without an exit status")
    return int(code)

"""CPU time a small execution costs, by process kind, on the embedded stack.

One user, one unit (the user's default unit, started by the first execution; the benchmark
then waits until the stack is quiet, the unit having warmed up). After WARMUP untimed runs,
the small workflow of benchmarks.small_workflow (10 rows, range -> filter, materialized) runs
RUNS times back to back, each from the submit call through the gateway to its first page of
ReadResultPage, in ROUNDS rounds. The CPU time (user and system, psutil) of every process of
the stack is read before a round and after it once the stack is quiet again; the difference,
divided by RUNS, is printed by kind: the gateway, the registry, the result service, the
development catalog, the S3 endpoint, PostgreSQL, the unit's Python driver, its JVM and its
Python workers (the worker daemon and the workers it forks), and this process (the client). A
process that ends during the runs counts with its parent, which reaps it. CPU time does not
grow, as wall time does, when other work shares the cores; but it follows the machine's speed,
which on a shared host drifts by a sixth from one run to the next, so two versions of the code
compare only in runs that alternate. Also printed: what each kind uses per second while the
stack is idle (its timers), over IDLE_SECONDS before the rounds. Nothing is asserted.

The services run without the gateway's rate limit and record no spans, as by default.

With --unit-java-options, the unit's driver JVM gets those options after its own
(TEXERA_LAKE_CU_SPARK_DRIVER_JAVA_OPTIONS): to compare JIT settings, for example.

Run: .venv/bin/python -m benchmarks.execution_cpu [--runs N] [--warmup N] [--rounds N]
     [--idle-seconds S] [--unit-java-options OPTIONS]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

from benchmarks.shared import UNLIMITED, UNTRACED, lake, settled
from benchmarks.small_workflow import KEPT_ROWS, Client, seconds
from embedded_stack.stack import Stack

SERVICE_ENV = {**UNLIMITED, **UNTRACED}
#: The unit setting --unit-java-options sets.
JAVA_OPTIONS = "TEXERA_LAKE_CU_SPARK_DRIVER_JAVA_OPTIONS"
#: The stack's parts, by the name Stack.pid knows them, and the kind each is printed as.
PARTS = {
    "gateway": "gateway",
    "warehouse-service": "registry",
    "result-service": "result service",
    "dev-catalog": "development catalog",
    "s3": "S3 endpoint",
    "postgres": "PostgreSQL",
}
DRIVER, JVM, WORKERS, CLIENT = "unit: Python driver", "unit: JVM", "unit: Python workers", "client"
UNIT_KINDS = (DRIVER, JVM, WORKERS)
KINDS = (*PARTS.values(), *UNIT_KINDS, CLIENT)


def _command(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def _is_unit(process: psutil.Process) -> bool:
    command = _command(process)
    return any(a == "-m" and b == "cu_service" for a, b in itertools.pairwise(command))


def _is_java(process: psutil.Process) -> bool:
    command = _command(process)
    return bool(command) and command[0].endswith("java")


def _descendants(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def processes_by_kind(stack: Stack) -> dict[int, tuple[str, psutil.Process]]:
    """Every process of the stack and its units, by pid, with its kind."""
    found: dict[int, tuple[str, psutil.Process]] = {}

    def add(kind: str, processes: Iterable[psutil.Process]) -> None:
        for process in processes:
            found.setdefault(process.pid, (kind, process))

    for part, kind in PARTS.items():
        root = psutil.Process(stack.pid(part))
        below = _descendants(root)
        for unit in filter(_is_unit, below):
            add(DRIVER, [unit])
            for child in _descendants(unit):
                add(JVM if _is_java(child) else WORKERS, [child])
        # What is left below a part is the part's own (a unit's launcher, PostgreSQL's
        # backends), counted with it.
        add(kind, [root, *below])
    add(CLIENT, [psutil.Process()])
    return found


def _cpu(process: psutil.Process) -> float | None:
    """Its CPU time and that of its ended children it has reaped; None once it has ended."""
    try:
        return sum(process.cpu_times()[:4])
    except psutil.Error:
        return None


@dataclass(frozen=True)
class Reading:
    """The CPU time of each process of the stack, at one moment."""

    cpu: dict[int, tuple[str, float]]

    @classmethod
    def take(cls, stack: Stack) -> Reading:
        cpu = {}
        for pid, (kind, process) in processes_by_kind(stack).items():
            used = _cpu(process)
            if used is not None:
                cpu[pid] = (kind, used)
        return cls(cpu)

    def since(self, earlier: Reading) -> dict[str, float]:
        """CPU seconds each kind used since earlier. A process that ended meanwhile is counted
        in its parent's reaped children's time, whole: what it had used at earlier is taken
        off there."""
        used = dict.fromkeys(KINDS, 0.0)
        for pid, (kind, now) in self.cpu.items():
            used[kind] += now - earlier.cpu.get(pid, (kind, 0.0))[1]
        for pid, (kind, before) in earlier.cpu.items():
            if pid not in self.cpu:
                used[kind] -= before
        return used


@dataclass(frozen=True)
class Round:
    runs: int
    #: Seconds of wall time of each run.
    times: list[float]
    #: CPU seconds by kind over all the runs.
    cpu: dict[str, float]

    def per_run(self, kind: str) -> float:
        return self.cpu[kind] / self.runs


def measure(stack: Stack, client: Client, runs: int) -> Round:
    """runs executions back to back; the CPU time read once the stack is quiet again, so that
    what they leave to do afterwards (a JVM compiling, a commit finishing) counts too."""
    before = Reading.take(stack)
    times = [seconds(client.run, KEPT_ROWS) for _ in range(runs)]
    settled()
    return Round(runs, times, Reading.take(stack).since(before))


def idle(stack: Stack, window: float) -> dict[str, float]:
    """CPU seconds per second each kind uses while nothing runs, over window seconds."""
    before = Reading.take(stack)
    time.sleep(window)
    return {kind: used / window for kind, used in Reading.take(stack).since(before).items()}


def report(rounds: list[Round], quiet: dict[str, float]) -> None:
    runs = rounds[0].runs
    print(
        f"CPU seconds per execution, {len(rounds)} round(s) of {runs} runs: median (range); "
        "and per second while idle"
    )
    for kind in (*KINDS, "all"):
        if kind == "all":
            values = [sum(r.cpu.values()) / r.runs for r in rounds]
            resting = sum(quiet.values())
        else:
            values = [r.per_run(kind) for r in rounds]
            resting = quiet[kind]
        print(
            f"  {kind:<22} {statistics.median(values):6.3f} "
            f"({min(values):.3f} to {max(values):.3f})   idle {resting:.4f}"
        )
    times = [t for r in rounds for t in r.times]
    print(f"wall time per execution: median {statistics.median(times) * 1000:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="executions in a round")
    parser.add_argument("--warmup", type=int, default=10, help="untimed executions first")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --runs executions")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle window")
    parser.add_argument(
        "--unit-java-options",
        help=f"the unit's {JAVA_OPTIONS} (its driver JVM's own options; default: none)",
    )
    args = parser.parse_args()
    environment = dict(SERVICE_ENV)
    if args.unit_java_options is not None:
        environment[JAVA_OPTIONS] = args.unit_java_options
    with lake(environment) as measured:
        stack = measured.stack
        client = Client(stack, measured.warehouse.warehouse_id)
        print("starting the unit ...", flush=True)
        seconds(client.run, KEPT_ROWS)
        waited = settled()
        print(f"the stack went quiet within {waited:.0f} s; warming up ...", flush=True)
        for _ in range(args.warmup):
            seconds(client.run, KEPT_ROWS)
        settled()
        quiet = idle(stack, args.idle_seconds)
        rounds = []
        for number in range(args.rounds):
            settled()
            started = time.monotonic()
            rounds.append(measure(stack, client, args.runs))
            print(f"  round {number + 1}: {time.monotonic() - started:.0f} s", flush=True)
    print()
    report(rounds, quiet)


if __name__ == "__main__":
    main()

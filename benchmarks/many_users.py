"""Many users on one machine, and a new user's wait for a first result, with and without warm units.

Both parts in one run:

  1. many users: one stack, USERS users, each with a warehouse and a unit of their own (the
     user's default unit, made by their first submission; these first submissions run two
     at a time before the window opens, and the benchmark then waits for the stack to go
     quiet; then every user runs the small workflow once, untimed, all at once, so that each
     unit is in use when the window opens; then the first user runs it ALONE_RUNS times alone,
     one after another, the baseline of the window's figures in the same run: the machine's
     speed moves from run to run as much as the code's changes do). For SECONDS, every user
     submits the small workflow of benchmarks.small_workflow (10 rows, range -> filter,
     materialized) again and again, each timed from the submit call until ReadResultPage
     through the gateway has returned its first page; meanwhile one more user (the
     benchmark's USER, with a unit of their own too) writes a result of LARGE_ROWS rows
     (four columns) again and again, as long as the window lasts.
     Printed: p50 and p95 of the small workflows, executions per minute of all users
     together, the large writes; the machine's memory in use (psutil.virtual_memory().used,
     which counts whatever else runs on the machine) before the stack started, when the window
     opened and the most while it lasted, sampled each second; and the sum of the PSS
     (proportional set size) of every unit's processes (each `python -m cu_service` among the
     registry's descendants, with its JVM and Python workers), when the window opened and the
     most, sampled every PSS_EVERY seconds, if this process may read them (as root it may);
     and the cores in use over the window, on average: the machine's, each service's, this
     process's, the busiest unit's (the large write's) and the other units' together; and
     the CPU a small execution cost: the cores in use less the busiest unit's and this
     process's, over the small executions a second; and against them, one user's runs alone
     (p50, and the CPU one cost: the machine's busy cores less this process's).
  2. a new user's first result: NEW_USERS new users, one after another, each with a new
     warehouse, submit the small workflow for the first time (which makes and starts their
     unit), timed from the submit call until the first page is read; the stack is quiet
     before each. First on a stack whose registry keeps no warm units
     (TEXERA_LAKE_WAREHOUSE_UNIT_POOL_SIZE=0), then on one that keeps POOL_SIZE of them: there
     the timing starts once that many pooled units show they are ready (each makes the ready
     file of unit_launcher.hand_over beside its hand-over pipe, in its home under the stack's
     unit root), waiting POOL_WARM_SECONDS at most, and the stack has gone quiet. Printed: p50
     and p95 of each, and with pool / without. The registry ignores a setting it does not
     declare: if it does not declare the pool's, or does not start with it, the part with the
     pool is skipped, saying so.

A failed execution (one that does not succeed or gives other rows, or a call that fails) does
not stop the run: it is counted by kind (small workflows, large writes, new users' first
executions, part 1's first submissions among them), left out of the figures, and the run goes
on after a pause of PAUSE_AFTER_FAILURE; the end of the output gives the count of each kind
with its first error, and a run with failures exits with status 1.

The services run without the gateway's rate limit and record no spans, as by default. Part 1
runs with the pool off, so that its units are its users' and its writer's; it runs once for
each of the units' cgroups modes --cpu-groups lists (TEXERA_LAKE_WAREHOUSE_UNIT_CPU_GROUPS,
unit_launcher.cpu_groups: off, or auto, each unit in a cgroup of its own where the registry may
make them, as root), in that order, on a fresh stack each time; by default off, then auto.
When both modes ran, it prints the ratios of auto's figures to off's, each mode's runs taken
together; a balanced order (auto,off,off,auto) keeps a drift of the machine's speed over the
run from favouring either. Nothing else is asserted. --quick runs a small version end to end
(QUICK; flags given with it win).

Run: .venv/bin/python -m benchmarks.many_users [--users N] [--seconds S] [--large-rows N]
     [--new-users N] [--pool-size N] [--pool-warm-seconds S] [--cpu-groups off,auto]
     [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import TypeVar

import grpc
import psutil

from benchmarks.execution_cpu import CLIENT, UNIT_KINDS, Reading
from benchmarks.shared import (
    UNLIMITED,
    UNTRACED,
    ExecutionFailed,
    Lake,
    Sampler,
    lake,
    plan,
    process_cpu,
    run_execution,
    settled,
)
from benchmarks.small_workflow import KEPT_ROWS, Client, percentile, seconds
from benchmarks.unit_start import Submitter
from embedded_stack.stack import Stack
from service_runtime.processes import ProcessFailed
from unit_launcher.hand_over import READY_SUFFIX
from warehouse_service.settings import WarehouseServiceSettings

POOL_SETTING = "TEXERA_LAKE_WAREHOUSE_UNIT_POOL_SIZE"
CPU_GROUPS_SETTING = "TEXERA_LAKE_WAREHOUSE_UNIT_CPU_GROUPS"
#: The values of CPU_GROUPS_SETTING part 1 compares.
CPU_GROUP_MODES = ("off", "auto")
#: What every stack here runs its services with: no rate limit, no spans.
SERVICE_ENV = {**UNLIMITED, **UNTRACED}
#: How many users' first submissions (each starts a unit) run at once before the window.
STARTING_AT_ONCE = 2
#: Seconds between two readings of the units' PSS while the window lasts.
PSS_EVERY = 10
#: Small workflows one user runs alone, one after another, right before the window: what one
#: costs on this machine at that moment, the baseline of the window's figures.
ALONE_RUNS = 20
GIB = 1024**3
T = TypeVar("T")


@dataclass(frozen=True)
class Sizes:
    users: int = 8
    seconds: float = 120.0
    large_rows: int = 5_000_000
    new_users: int = 3


FULL = Sizes()
QUICK = Sizes(users=2, seconds=20.0, large_rows=200_000, new_users=1)


# -- failures ----------------------------------------------------------------------------

#: The kinds of execution a failure is counted for: the users' small workflows (part 1), the
#: large writes (part 1), and new users' first executions (part 1's and part 2's).
SMALL, LARGE, NEW_USER = "small workflow", "large write", "new user's first"
KINDS = (SMALL, LARGE, NEW_USER)
#: How an execution fails here: it does not succeed (or gives other rows), or a call fails.
FAILED = (ExecutionFailed, grpc.RpcError)
#: The pause after a failure before the next try, so that a stack that refuses every call at
#: once is not asked again and again in a busy loop.
PAUSE_AFTER_FAILURE = 1.0


def _message(error: BaseException) -> str:
    """The error in one line: a call's status and details, or what the execution said."""
    code, details = getattr(error, "code", None), getattr(error, "details", None)
    if isinstance(error, grpc.RpcError) and callable(code) and callable(details):
        return f"{code().name}: {details()}"
    return str(error)


class Failures:
    """Failed executions by kind, counted from any thread, with the first error of each kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.first: dict[str, str] = {}

    def attempt(self, kind: str, action: Callable[[], T]) -> T | None:
        """What action returns; None if it failed, which is counted (and paused after; the
        first failure of each kind is printed as it happens)."""
        try:
            return action()
        except FAILED as exc:
            with self._lock:
                self.counts[kind] += 1
                first = kind not in self.first
                self.first.setdefault(kind, _message(exc))
            if first:
                print(f"   a {kind} execution failed (counted): {_message(exc)}", flush=True)
            time.sleep(PAUSE_AFTER_FAILURE)
            return None

    def total(self) -> int:
        return sum(self.counts.values())

    def report(self) -> None:
        if not self.total():
            print("failed executions: none")
            return
        print(f"FAILED EXECUTIONS: {self.total()}; the figures above leave them out")
        for kind in KINDS:
            if self.counts[kind]:
                print(f"   {kind}: {self.counts[kind]}, the first: {self.first[kind]}")


# -- memory ------------------------------------------------------------------------------


def _is_unit(process: psutil.Process) -> bool:
    try:
        command = process.cmdline()
    except psutil.Error:
        return False
    return any(a == "-m" and b == "cu_service" for a, b in itertools.pairwise(command))


def units_of(registry_pid: int) -> list[psutil.Process]:
    """The units the registry runs: each `python -m cu_service` among its descendants."""
    return [p for p in psutil.Process(registry_pid).children(recursive=True) if _is_unit(p)]


def unit_processes(registry_pid: int) -> tuple[int, list[psutil.Process]]:
    """How many units the registry runs, and all their processes: each unit with its own
    descendants (its JVM, Python workers)."""
    units = units_of(registry_pid)
    found: dict[int, psutil.Process] = {}
    for unit in units:
        with contextlib.suppress(psutil.NoSuchProcess):
            for process in (unit, *unit.children(recursive=True)):
                found[process.pid] = process
    return len(units), list(found.values())


def units_pss(registry_pid: int) -> int | None:
    """The sum of the PSS of all the units' processes, in bytes; None if one of them may not
    be read (this process is not root, nor their user)."""
    total = 0
    for process in unit_processes(registry_pid)[1]:
        try:
            total += process.memory_full_info().pss
        except psutil.NoSuchProcess:
            continue
        except psutil.AccessDenied:
            return None
    return total


class MemorySampler(Sampler):
    """The machine's memory in use and the units' PSS, when made and at most, sampled while in
    use: the machine's each second, the units' every PSS_EVERY seconds (the kernel walks a
    process's pages for its PSS: some 24 ms of CPU for a unit's five processes, so nine
    units' each second would take a tenth of a 2-core machine from what is measured)."""

    def __init__(self, registry_pid: int) -> None:
        super().__init__(1.0)
        self._registry_pid = registry_pid
        self._samples = 0
        self.used_at_start = self.used_peak = psutil.virtual_memory().used
        self.units_at_start = unit_processes(registry_pid)[0]
        self.pss_at_start = self.pss_peak = units_pss(registry_pid)

    def sample(self) -> None:
        self.used_peak = max(self.used_peak, psutil.virtual_memory().used)
        self._samples += 1
        if self._samples % PSS_EVERY or self.pss_peak is None:
            return
        pss = units_pss(self._registry_pid)
        if pss is not None:
            self.pss_peak = max(self.pss_peak, pss)


# -- CPU ---------------------------------------------------------------------------------


def _tree_cpu(root: psutil.Process) -> float:
    """CPU seconds of root and its descendants, with the ended children each has reaped."""
    with contextlib.suppress(psutil.NoSuchProcess):
        return sum(process_cpu(p) for p in (root, *root.children(recursive=True)))
    return 0.0


def _machine_busy() -> float:
    """CPU seconds the machine's cores have been busy since boot (idle and waiting left out)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


@dataclass(frozen=True)
class CpuReading:
    """What the machine, each part of the stack and each unit had used, at one moment."""

    machine: float
    parts: Reading
    #: Each unit's process tree, by the pid of its `python -m cu_service`.
    units: dict[int, float]

    @classmethod
    def take(cls, stack: Stack) -> CpuReading:
        units = units_of(stack.pid("warehouse-service"))
        return cls(_machine_busy(), Reading.take(stack), {u.pid: _tree_cpu(u) for u in units})


@dataclass(frozen=True)
class CpuShares:
    """Cores used on average over a span: the machine's, each of the stack's services', the
    busiest unit's (in part 1, the large write's) and the other units' together."""

    machine: float
    services: dict[str, float]
    busiest_unit: float
    other_units: float

    @classmethod
    def between(cls, earlier: CpuReading, later: CpuReading, seconds: float) -> CpuShares:
        by_kind = later.parts.since(earlier.parts)
        services = {kind: used for kind, used in by_kind.items() if kind not in UNIT_KINDS}
        units = sorted(
            (used - earlier.units.get(pid, 0.0) for pid, used in later.units.items()),
            reverse=True,
        )
        return cls(
            (later.machine - earlier.machine) / seconds,
            {kind: used / seconds for kind, used in services.items()},
            (units[0] if units else 0.0) / seconds,
            sum(units[1:]) / seconds,
        )

    def cores_of_the_rest(self) -> float:
        """Cores used by all but the busiest unit and this process: in part 1, the small
        workflows' (and the services' share of the large write)."""
        return self.machine - self.busiest_unit - self.services.get(CLIENT, 0.0)

    def report(self) -> None:
        services = ", ".join(f"{kind} {cores:.2f}" for kind, cores in self.services.items())
        print(
            f"   cores in use over the window: the machine {self.machine:.2f} of "
            f"{psutil.cpu_count()}; the busiest unit (the large write's) {self.busiest_unit:.2f}, "
            f"the other units {self.other_units:.2f}; {services}"
        )


# -- part 1: many users --------------------------------------------------------------------


@dataclass(frozen=True)
class Alone:
    """One user's small workflows alone on the stack, one after another."""

    #: Seconds: each, submit -> first page.
    times: list[float]
    #: CPU seconds one cost the machine (its busy cores, less this process's).
    cpu_each: float

    def report(self, window: list[float], window_cpu_each: float) -> None:
        if not self.times:
            print("   one user alone: no run succeeded")
            return
        p50 = statistics.median(self.times)
        print(
            f"   one user alone, right before the window: {len(self.times)} runs, "
            f"p50 {p50 * 1000:.0f} ms, CPU an execution {self.cpu_each:.2f} s"
        )
        if window and self.cpu_each:
            print(
                f"   the window against one user alone: p50 {statistics.median(window) / p50:.1f}"
                f" times, CPU an execution {window_cpu_each / self.cpu_each:.2f} times"
            )


def one_user_alone(stack: Stack, client: Client, failures: Failures) -> Alone:
    """ALONE_RUNS of client's small workflow, one after another, on an otherwise idle stack."""
    before, started = CpuReading.take(stack), time.monotonic()
    timed = partial(seconds, client.run, KEPT_ROWS)
    times = [t for _ in range(ALONE_RUNS) if (t := failures.attempt(SMALL, timed)) is not None]
    span = time.monotonic() - started
    shares = CpuShares.between(before, CpuReading.take(stack), span)
    busy = shares.machine - shares.services.get(CLIENT, 0.0)
    return Alone(times, busy * span / len(times) if times else 0.0)


def client_of(stack: Stack, user: Submitter) -> Client:
    """user's small-workflow calls through the gateway, on their own warehouse."""
    return Client(stack, user.warehouse_id, user.metadata)


def one_lap(clients: list[Client], failures: Failures) -> None:
    """Every user runs one small workflow, untimed, all at once: each unit is in use when the
    window opens, as its users' units are while they work. (Starting the units takes longer
    than TEXERA_LAKE_CU_PYTHON_IDLE_SECONDS, after which a unit ends its Python worker
    daemon.)"""
    with ThreadPoolExecutor(len(clients)) as pool:
        for lap in [pool.submit(failures.attempt, SMALL, client.run) for client in clients]:
            lap.result()


def until(
    deadline: float, kind: str, timed: Callable[[], float], failures: Failures
) -> list[float]:
    """The seconds of each run of timed, one after another, until deadline; those that fail
    are counted in failures as kind."""
    times = []
    while time.monotonic() < deadline:
        elapsed = failures.attempt(kind, timed)
        if elapsed is not None:
            times.append(elapsed)
    return times


def large_write(measured: Lake, rows: int) -> float:
    """The seconds of one result of rows rows that USER writes."""
    elapsed, final = run_execution(measured.stack, measured.warehouse.warehouse_id, plan(rows))
    if final.outputs[0].row_count != rows:
        raise ExecutionFailed(f"the large write gave {final.outputs[0].row_count} rows")
    return elapsed


@dataclass(frozen=True)
class ManyUsers:
    #: TEXERA_LAKE_WAREHOUSE_UNIT_CPU_GROUPS of the run.
    cpu_groups: str
    users: int
    #: Seconds: each small workflow, submit -> first page.
    small: list[float]
    #: Seconds from the window's opening until the last small workflow returned.
    span: float
    large_rows: int
    writes: list[float]
    #: Seconds the users' and the writer's first submissions took, all together.
    units_started: float
    settled: float
    #: psutil.virtual_memory().used before the stack started.
    used_before: int
    memory: MemorySampler
    cpu: CpuShares
    alone: Alone

    def report(self) -> None:
        print(
            f"1. many users, units' cgroups {self.cpu_groups}: {self.users} users for "
            f"{self.span:.0f} s, while one more user writes {self.large_rows:,} rows again "
            "and again"
        )
        print(
            f"   units started in {self.units_started:.0f} s ({STARTING_AT_ONCE} at once), "
            f"then the stack went quiet within {self.settled:.0f} s"
        )
        if self.small:
            p50, p95 = statistics.median(self.small), percentile(self.small, 0.95)
            print(
                f"   small workflow, submit -> first page: {len(self.small)} runs, "
                f"p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms"
            )
        else:
            print("   small workflow: no run succeeded")
        print(f"   executions per minute, all users: {len(self.small) * 60 / self.span:.0f}")
        if self.writes:
            median = statistics.median(self.writes)
            print(f"   large writes: {len(self.writes)}, median {median:.1f} s")
        self.cpu.report()
        each = self.cpu.cores_of_the_rest() * self.span / len(self.small) if self.small else 0.0
        if self.small:
            print(
                f"   CPU a small execution cost: {each:.2f} s (the machine's cores in use, less "
                "the busiest unit's and this process's, over the executions a second)"
            )
        self.alone.report(self.small, each)
        self._report_memory()

    def _report_memory(self) -> None:
        memory = self.memory
        print(
            f"   machine memory in use: {self.used_before / GIB:.1f} GiB before the stack, "
            f"{memory.used_at_start / GIB:.1f} GiB at the window's start, "
            f"{memory.used_peak / GIB:.1f} GiB at most"
        )
        if memory.pss_at_start is None or memory.pss_peak is None:
            print("   the units' PSS: not readable by this process (run as root)")
            return
        print(
            f"   PSS of the {memory.units_at_start} units' processes: "
            f"{memory.pss_at_start / GIB:.1f} GiB at the window's start, "
            f"{memory.pss_peak / GIB:.1f} GiB at most"
        )


def start_units(measured: Lake, users: list[Submitter], failures: Failures) -> float:
    """Each user's and the writer's first submission, which makes and starts their unit,
    STARTING_AT_ONCE at a time; the seconds they took together. Those that fail are counted in
    failures (a user whose unit did not start then starts it with their first small workflow)."""
    started = time.perf_counter()
    stack, warehouse_id = measured.stack, measured.warehouse.warehouse_id
    firsts: list[Callable[[], object]] = [
        lambda: run_execution(stack, warehouse_id, plan(1000)),
        *(user.run for user in users),
    ]
    with ThreadPoolExecutor(STARTING_AT_ONCE) as pool:
        list(pool.map(lambda first: failures.attempt(NEW_USER, first), firsts))
    return time.perf_counter() - started


def many_users(sizes: Sizes, failures: Failures, cpu_groups: str) -> ManyUsers:
    used_before = psutil.virtual_memory().used
    environment = {**SERVICE_ENV, POOL_SETTING: "0", CPU_GROUPS_SETTING: cpu_groups}
    with lake(environment) as measured:
        stack = measured.stack
        gateway = stack.channel("gateway", presenting=None)
        users = [Submitter(stack, gateway) for _ in range(sizes.users)]
        print(f"1. units' cgroups {cpu_groups}: starting {sizes.users + 1} units ...", flush=True)
        units_started = start_units(measured, users, failures)
        waited = settled()
        clients = [client_of(stack, user) for user in users]
        one_lap(clients, failures)
        alone = one_user_alone(stack, clients[0], failures)
        print(f"   the window: {sizes.seconds:.0f} s ...", flush=True)
        with (
            MemorySampler(stack.pid("warehouse-service")) as memory,
            ThreadPoolExecutor(len(clients) + 1) as pool,
        ):
            opened, opening = time.monotonic(), CpuReading.take(stack)
            deadline = opened + sizes.seconds
            large = partial(large_write, measured, sizes.large_rows)
            writes = pool.submit(until, deadline, LARGE, large, failures)
            loops = [
                pool.submit(
                    until, deadline, SMALL, partial(seconds, client.run, KEPT_ROWS), failures
                )
                for client in clients
            ]
            small = [elapsed for loop in loops for elapsed in loop.result()]
            span = time.monotonic() - opened
            cpu = CpuShares.between(opening, CpuReading.take(stack), span)
            written = writes.result()
    return ManyUsers(
        cpu_groups,
        sizes.users,
        small,
        span,
        sizes.large_rows,
        written,
        units_started,
        waited,
        used_before,
        memory,
        cpu,
        alone,
    )


# -- part 2: a new user's first result -----------------------------------------------------


def registry_declares(variable: str) -> bool:
    """The registry has the setting (it ignores those it does not declare)."""
    return any(name == variable for name, _, _ in WarehouseServiceSettings.describe())


def ready_pooled_units(stack: Stack) -> int:
    """The pooled units that show they are warm and wait for a user (their ready files)."""
    return len(list(stack.unit_root.glob(f"*/secrets/*{READY_SUFFIX}")))


def wait_for_pool(stack: Stack, size: int, longest: float) -> tuple[float, int]:
    """Waits until size pooled units are ready (longest seconds at most), then until the
    stack is quiet; the seconds waited, and how many were ready when that wait ended."""
    started = time.monotonic()
    while ready_pooled_units(stack) < size and time.monotonic() - started < longest:
        time.sleep(1.0)
    ready = ready_pooled_units(stack)
    settled()
    return time.monotonic() - started, ready


def first_results(stack: Stack, count: int, failures: Failures) -> list[float]:
    """Seconds from each of count new users' first submit call to their first page, one
    user after another, each once the stack is quiet; those that fail are counted in
    failures."""
    gateway = stack.channel("gateway", presenting=None)
    times = []
    for _ in range(count):
        client = client_of(stack, Submitter(stack, gateway))
        settled()
        elapsed = failures.attempt(NEW_USER, partial(seconds, client.run, KEPT_ROWS))
        if elapsed is not None:
            times.append(elapsed)
    return times


@dataclass(frozen=True)
class PoolRun:
    """The new users' first results on a stack keeping warm units."""

    times: list[float]
    #: Seconds waited for the pool to fill and the stack to go quiet.
    waited: float
    #: The pooled units ready when the wait for them ended.
    ready: int


@dataclass(frozen=True)
class NewUsers:
    without_pool: list[float]
    pool_size: int
    pooled: PoolRun | None
    #: Why the part with the pool was skipped, if it was.
    skipped: str = ""

    def report(self) -> None:
        print("2. a new user's first result, submit -> first page")
        times_line("no pool", self.without_pool)
        label = f"pool of {self.pool_size}"
        if self.pooled is None:
            print(f"   {label:<12} skipped: {self.skipped}")
            return
        times_line(label, self.pooled.times)
        waited, ready = self.pooled.waited, self.pooled.ready
        print(f"   (after {waited:.0f} s, pooled units ready: {ready} of {self.pool_size})")
        if self.pooled.times and self.without_pool:
            p50 = statistics.median(self.pooled.times) / statistics.median(self.without_pool)
            p95 = percentile(self.pooled.times, 0.95) / percentile(self.without_pool, 0.95)
            print(f"   with pool / without: p50 {p50:.2f}, p95 {p95:.2f}")
        if ready == 0 < self.pool_size:
            print(
                "   no pooled unit was ready: these users waited for new units, as without a pool"
            )


def times_line(label: str, times: list[float]) -> None:
    if not times:
        print(f"   {label:<12} no first result succeeded")
        return
    p50, p95 = statistics.median(times), percentile(times, 0.95)
    print(f"   {label:<12} users: {len(times)}, p50 {p50:6.2f} s, p95 {p95:6.2f} s")


def with_pool(pool_size: int, count: int, longest: float, failures: Failures) -> PoolRun | str:
    """count new users' first results on a stack keeping pool_size warm units, once the pool
    is filled (or longest seconds have passed); or why they could not be measured."""
    if pool_size and not registry_declares(POOL_SETTING):
        return f"the registry does not declare {POOL_SETTING} (it would ignore it)"
    with contextlib.ExitStack() as scope:
        try:
            measured = scope.enter_context(lake({**SERVICE_ENV, POOL_SETTING: str(pool_size)}))
        except ProcessFailed as exc:
            return f"the stack did not start with {POOL_SETTING}={pool_size}: {exc}"
        waited, ready = wait_for_pool(measured.stack, pool_size, longest)
        return PoolRun(first_results(measured.stack, count, failures), waited, ready)


def new_users(count: int, pool_size: int, longest: float, failures: Failures) -> NewUsers:
    print(f"2. new users: {count} with no pool ...", flush=True)
    with lake({**SERVICE_ENV, POOL_SETTING: "0"}) as measured:
        without = first_results(measured.stack, count, failures)
    print(f"   new users: {count} with a pool of {pool_size} ...", flush=True)
    pooled = with_pool(pool_size, count, longest, failures)
    if isinstance(pooled, str):
        print(f"   skipped: {pooled}", flush=True)
        return NewUsers(without, pool_size, None, pooled)
    return NewUsers(without, pool_size, pooled)


def cpu_group_modes(asked: str) -> list[str]:
    """The modes part 1 runs in, in order (asked: comma-separated); a registry that does not
    declare the setting runs "auto" alone (it would ignore "off")."""
    modes = [mode.strip() for mode in asked.split(",")]
    if unknown := sorted(set(modes) - set(CPU_GROUP_MODES)):
        raise SystemExit(f"--cpu-groups: {', '.join(unknown)} is not one of {CPU_GROUP_MODES}")
    if not registry_declares(CPU_GROUPS_SETTING):
        print(f"the registry does not declare {CPU_GROUPS_SETTING}: part 1 runs once")
        return ["auto"]
    return modes


def compare_crowds(crowds: list[ManyUsers]) -> None:
    """With cgroups against without, each mode's runs taken together, when both modes ran and
    each has small workflows."""
    small = {
        mode: [t for c in crowds if c.cpu_groups == mode for t in c.small]
        for mode in CPU_GROUP_MODES
    }
    span = {mode: sum(c.span for c in crowds if c.cpu_groups == mode) for mode in CPU_GROUP_MODES}
    off, auto = sorted(small["off"]), sorted(small["auto"])
    if not (off and auto):
        return
    print(
        "   cgroups auto / off: "
        f"p50 {statistics.median(auto) / statistics.median(off):.2f}, "
        f"p95 {percentile(auto, 0.95) / percentile(off, 0.95):.2f}, "
        f"executions a minute {(len(auto) / span['auto']) / (len(off) / span['off']):.2f}"
    )


def sizes_of(args: argparse.Namespace) -> Sizes:
    """The sizes the flags give, on FULL's defaults or, with --quick, QUICK's."""
    chosen = QUICK if args.quick else FULL
    given = {
        f.name: getattr(args, f.name) for f in fields(Sizes) if getattr(args, f.name) is not None
    }
    return replace(chosen, **given)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, help=f"default {FULL.users}")
    parser.add_argument("--seconds", type=float, help=f"the window, default {FULL.seconds:.0f}")
    parser.add_argument("--large-rows", type=int, help=f"default {FULL.large_rows:,}")
    parser.add_argument("--new-users", type=int, help=f"default {FULL.new_users}")
    parser.add_argument("--pool-size", type=int, default=2, help="warm units kept, part 2")
    parser.add_argument(
        "--pool-warm-seconds", type=float, default=300.0, help="longest wait for them"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK.users} users, {QUICK.seconds:.0f} s, {QUICK.large_rows:,} rows, "
        f"{QUICK.new_users} new user",
    )
    parser.add_argument(
        "--cpu-groups",
        default="off,auto",
        help="the units' cgroups modes part 1 runs in, in order (off,auto by default; "
        "auto,off,off,auto compares them fairly)",
    )
    args = parser.parse_args()
    sizes = sizes_of(args)
    failures = Failures()
    crowds = [many_users(sizes, failures, mode) for mode in cpu_group_modes(args.cpu_groups)]
    arrivals = new_users(sizes.new_users, args.pool_size, args.pool_warm_seconds, failures)
    print()
    for crowd in crowds:
        crowd.report()
    compare_crowds(crowds)
    arrivals.report()
    failures.report()
    if failures.total():
        raise SystemExit(1)


if __name__ == "__main__":
    main()

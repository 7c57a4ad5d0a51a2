"""What an idle computing unit holds: the proportional set size (PSS) of its process tree.

On the embedded stack, a user submits a few small workflows to their default unit; the
benchmark waits until the stack is quiet (the unit has warmed up, see
TEXERA_LAKE_CU_WARM_UP_JOBS), then, once it has been idle for each of IDLE seconds, prints
the PSS of the unit's processes by kind: its JVM, its Python driver, the Python worker daemon
and the workers it forked. Shared pages count once, split between the processes that share
them. Then it runs one more workflow and compares its time (submit to done) with that of the
last one before the idle time. Run as root (units then run as users of their own) or as the
stack's user. Nothing is asserted.

Run: .venv/bin/python -m benchmarks.unit_memory [--workflows N] [--idle SECONDS ...]
     [--mappings N] [--env NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter, defaultdict

import psutil

from benchmarks.shared import UNTRACED, USER, lake, range_then, run_execution, settled

WORKFLOW = range_then("small", {"end": 1000}, "even", {"filter": {"condition": "id % 2 = 0"}})
MIB = 1024 * 1024
KINDS = ("JVM", "Python driver", "Python worker daemon", "Python workers")


def kind_of(process: psutil.Process, daemon_pids: set[int]) -> str:
    """Which part of the unit a process of its tree is: the daemon's descendants are
    workers (and, in a sandboxed unit, the processes of their tasks)."""
    if process.name() == "java":
        return "JVM"
    command = process.cmdline()
    if "cu_service.worker_daemon" in command:
        if any(parent.pid in daemon_pids for parent in process.parents()):
            return "Python workers"
        daemon_pids.add(process.pid)
        return "Python worker daemon"
    return "Python driver" if "cu_service" in command else "other"


def pss_by_mapping(process: psutil.Process) -> Counter[str]:
    """PSS in bytes of a process's mappings, by what they map: a file's path, or a bracketed
    name such as [anon] (memory of its own) or [heap]."""
    return Counter({mapping.path: mapping.pss for mapping in process.memory_maps(grouped=True)})


def pss_by_kind(unit_pid: int) -> tuple[dict[str, Counter[str]], dict[str, int]]:
    """PSS in bytes, by mapping, and the number of processes, of each kind in the unit's
    tree."""
    unit = psutil.Process(unit_pid)
    pss: dict[str, Counter[str]] = defaultdict(Counter)
    count: dict[str, int] = defaultdict(int)
    daemon_pids: set[int] = set()
    # Parents before children: the daemon is seen before the workers it forked.
    for process in sorted([unit, *unit.children(recursive=True)], key=lambda p: p.create_time()):
        try:
            kind = kind_of(process, daemon_pids)
            pss[kind].update(pss_by_mapping(process))
        except psutil.NoSuchProcess:  # a task's process that ended meanwhile
            continue
        count[kind] += 1
    return pss, count


def report(pss: dict[str, Counter[str]], count: dict[str, int], mappings: int) -> None:
    """Each kind's PSS, and with mappings > 0 its largest mappings."""
    for kind in [*KINDS, *sorted(set(pss) - set(KINDS))]:
        total = pss[kind].total()
        print(f"{kind:<22} {count[kind]:>3} processes  {total / MIB:>7.1f} MiB")
        for name, size in pss[kind].most_common(mappings):
            print(f"    {size / MIB:>7.1f} MiB  {name}")
    whole = sum(counter.total() for counter in pss.values())
    print(f"{'total':<22} {sum(count.values()):>3} processes  {whole / MIB:>7.1f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workflows", type=int, default=5, help="small workflows submitted")
    parser.add_argument(
        "--idle", type=float, nargs="+", default=[20.0, 60.0], help="seconds idle once quiet"
    )
    parser.add_argument(
        "--mappings", type=int, default=0, help="also print each kind's largest mappings"
    )
    parser.add_argument(
        "--env", action="append", default=[], help="NAME=VALUE for the stack's services"
    )
    args = parser.parse_args()
    service_env = dict(UNTRACED, **dict(pair.split("=", 1) for pair in args.env))
    with lake(service_env) as measured:
        warehouse_id = measured.warehouse.warehouse_id
        for _ in range(args.workflows):
            warm, _ = run_execution(measured.stack, warehouse_id, WORKFLOW)
        unit = measured.stack.unit_for(USER)
        print(f"{args.workflows} small workflows run; quiet after {settled():.0f} s more")
        quiet = time.monotonic()
        for idle in sorted(args.idle):
            time.sleep(max(0.0, quiet + idle - time.monotonic()))
            print(f"\nafter {idle:.0f} s idle, the unit's processes hold (PSS):")
            report(*pss_by_kind(unit.pid), args.mappings)
        after, _ = run_execution(measured.stack, warehouse_id, WORKFLOW)
        print(
            f"\nthe next workflow took {after:.2f} s, the last one before the idle time "
            f"{warm:.2f} s: {after / warm:.2f} times as long"
        )


if __name__ == "__main__":
    main()

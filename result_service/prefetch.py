"""Reading ahead: several producers at once, each on its own thread, consumed in order.

A producer is a function returning an iterator (the chunks of one data file).
Up to `ahead` producers run at once; each may get at most `depth` items ahead
of the consumer, so memory stays bounded whatever the size of what is read.
Closing the prefetcher (or a failure) stops every producer within a fraction of
a second: a stream whose client went away stops reading storage.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class _Done:
    failure: BaseException | None = None


class _Producer(threading.Thread, Generic[T]):
    def __init__(self, produce: Callable[[], Iterable[T]], depth: int, stop: threading.Event):
        super().__init__(name="result-read-ahead", daemon=True)
        self.items: queue.Queue[T | _Done] = queue.Queue(depth)
        self._produce = produce
        self._stopping = stop  # not _stop: threading.Thread has a method of that name

    def run(self) -> None:
        try:
            for item in self._produce():
                if not self._put(item):
                    return
        except BaseException as exc:  # handed to the consumer, which raises it
            self._put(_Done(exc))
        else:
            self._put(_Done())

    def _put(self, item: T | _Done) -> bool:
        while not self._stopping.is_set():
            try:
                self.items.put(item, timeout=_POLL_SECONDS)
            except queue.Full:
                continue
            return True
        return False


class Prefetcher(Generic[T]):
    def __init__(
        self, producers: Iterable[Callable[[], Iterable[T]]], *, ahead: int, depth: int = 2
    ) -> None:
        self._pending = iter(producers)
        self._ahead = ahead
        self._depth = depth
        self._stop = threading.Event()
        self._running: deque[_Producer[T]] = deque()

    def _start_next(self) -> None:
        if not self._stop.is_set() and (produce := next(self._pending, None)) is not None:
            producer = _Producer(produce, self._depth, self._stop)
            producer.start()
            self._running.append(producer)

    def items(self) -> Iterator[T]:
        """The items of every producer, in order; blocking."""
        for _ in range(self._ahead):
            self._start_next()
        while self._running:
            item = self._take(self._running[0])
            if item is None:  # closed meanwhile
                return
            if isinstance(item, _Done):
                self._running.popleft()
                if item.failure is not None:
                    raise item.failure
                self._start_next()
                continue
            yield item

    def _take(self, producer: _Producer[T]) -> T | _Done | None:
        while True:
            try:
                return producer.items.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                if self._stop.is_set():
                    return None

    def close(self) -> None:
        """Stops the producers and waits for their threads; blocking."""
        self._stop.set()
        for producer in self._running:
            producer.join()
        self._running.clear()

"""What asyncio and threads do differently, each written twice and nothing
else: a call bounded by a deadline (``AsyncCaller`` / ``Caller``), the
heartbeat of a held lease (``AsyncBeats`` / ``Beats``) and the sleep on a
booked slot (``AsyncSlotSleep`` / ``SlotSleep``). _aio.py uses the
Async names; scripts/unasync.py renames them for _sync.py, as httpcore's
_synchronization.py does."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
import time
from typing import Any, Awaitable, Callable, Optional

from ._core import LimiterTimeout

log = logging.getLogger("valkey_ratelimit")


def _timed_out(seconds: float) -> LimiterTimeout:
    return LimiterTimeout(f"no reply from Valkey within {seconds * 1000:g} ms (the limiter's timeout)")


class AsyncCaller:
    """Runs a coroutine function under the deadline. On expiry the call is
    cancelled and LimiterTimeout raised at once: the client's own clean-up
    of the cancelled call (valkey-py drops the connection it was reading)
    goes on in the background, not inside the caller's wait."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout

    async def call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        return await self.call_within(self.timeout, fn, *args, **kwargs)

    async def call_within(self, timeout: float, fn: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        """``call`` under another deadline (a call that waits on purpose)."""
        task = asyncio.ensure_future(fn(*args, **kwargs))
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout)
        except BaseException:
            task.cancel()
            raise
        if task in done:
            return task.result()
        task.cancel()
        task.add_done_callback(_forget)
        raise _timed_out(timeout)


def _forget(task: "asyncio.Future[Any]") -> None:
    """Reads a cancelled call's outcome, so asyncio does not log it as lost."""
    if not task.cancelled():
        task.exception()


class Caller:
    """Runs a function under the deadline, on a worker thread of its own
    small pool; the caller waits no longer than the timeout. A blocking
    client cannot be interrupted: a call that timed out keeps its worker
    until the client's socket gives up (set ``socket_timeout``), and the
    calls queued behind a full pool time out without ever running. The
    workers are daemon threads, so a hung call never holds up exit, and a
    worker idle for IDLE_S ends, so a limiter made and dropped leaves none."""

    WORKERS = 8
    IDLE_S = 30.0

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.call_within(self.timeout, fn, *args, **kwargs)

    def call_within(self, timeout: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call`` under another deadline (a call that waits on purpose)."""
        future: "concurrent.futures.Future[Any]" = concurrent.futures.Future()
        with self._lock:
            # Another worker only when none waits for work. Queued under
            # the lock, so that an idle worker that ends sees the job.
            if self._idle == 0 and self._workers < self.WORKERS:
                self._workers += 1
                threading.Thread(target=self._work, name="valkey-ratelimit", daemon=True).start()
            self._jobs.put((future, fn, args, kwargs))
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            # Still queued: it will never run. Running: its result is dropped.
            future.cancel()
            raise _timed_out(timeout) from None

    def _work(self) -> None:
        while True:
            with self._lock:
                self._idle += 1
            try:
                future, fn, args, kwargs = self._jobs.get(timeout=self.IDLE_S)
            except queue.Empty:
                with self._lock:
                    self._idle -= 1
                    if self._jobs.empty():
                        self._workers -= 1
                        return
                continue
            with self._lock:
                self._idle -= 1
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # handed to the caller, who raises it
                    future.set_exception(e)


class AsyncBeats:
    """A task that calls ``beat()`` every ``interval`` s while a lease is
    held. ``beat()`` answers False when the lease is gone: then ``lost``
    turns True and the block (the task that started the beats) is
    cancelled, unless it is already leaving. An exception in ``beat()``
    (Valkey unreachable) is tried again at the next beat."""

    def __init__(self, interval: float, beat: Callable[[], Awaitable[bool]]) -> None:
        self.lost = False
        self._interval = interval
        self._beat = beat
        self._leaving = False
        self._cancelled = False
        self._body = asyncio.current_task()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                alive = await self._beat()
            except Exception:
                continue
            if not alive:
                self.lost = True
                # No await since the check: the block has not begun to
                # leave, so the cancel lands inside it.
                if not self._leaving and self._body is not None:
                    self._cancelled = True
                    self._body.cancel()
                return

    async def stop(self, exc_type: Optional[type]) -> bool:
        """Ends the beats. True if the block is unwinding from our own
        cancel (which is then undone, so the caller can raise LeaseLost in
        its place)."""
        self._leaving = True
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        if self._cancelled and exc_type is asyncio.CancelledError:
            uncancel = getattr(self._body, "uncancel", None)
            if uncancel is not None:
                uncancel()
            return True
        return False


class Beats:
    """A daemon thread that calls ``beat()`` every ``interval`` s while a
    lease is held. ``beat()`` answers False when the lease is gone: then
    ``lost`` turns True and the beats stop. A thread cannot be interrupted:
    the block sees the loss through ``lost``. An exception in ``beat()``
    (Valkey unreachable) is tried again at the next beat."""

    def __init__(self, interval: float, beat: Callable[[], bool]) -> None:
        self._interval = interval
        self._beat = beat
        self._stop = threading.Event()
        self._lost = threading.Event()
        self._thread = threading.Thread(target=self._run, name="valkey-ratelimit-lease", daemon=True)
        self._thread.start()

    @property
    def lost(self) -> bool:
        return self._lost.is_set()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                alive = self._beat()
            except Exception:
                continue
            if not alive:
                self._lost.set()
                return

    def stop(self, exc_type: Optional[type]) -> bool:
        """Ends the beats; never interrupts the block, so always False."""
        self._stop.set()
        self._thread.join()
        return False


class AsyncSlotSleep:
    """The booking call and the sleep of a waiter whose turn the server
    books. ``book``: cancelled before the reply arrives, the call goes on
    (shielded: it may have booked) and what it answers is handed to
    ``give_back_late`` once. ``sleep``: ``seconds`` by the monotonic clock
    (a timer that fires early sleeps again for what is left); cancelled,
    it gives the slot back once, ``give_back()`` shielded from a second
    cancel, then re-raises the CancelledError. A give-back that fails is
    logged, never raised in the cancel's place."""

    @staticmethod
    async def book(call: Callable[[], Awaitable[Any]], give_back_late: Callable[[Any], Awaitable[Any]]) -> Any:
        task = asyncio.ensure_future(call())
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:

            def answered(done: "asyncio.Future[Any]") -> None:
                if not done.cancelled() and done.exception() is None:
                    asyncio.ensure_future(give_back_late(done.result())).add_done_callback(_forget)

            task.add_done_callback(answered)
            raise

    @staticmethod
    async def sleep(seconds: float, give_back: Callable[[], Awaitable[Any]]) -> None:
        end = time.monotonic() + seconds
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return
                await asyncio.sleep(left)
        except asyncio.CancelledError:
            refund = asyncio.ensure_future(give_back())
            refund.add_done_callback(_forget)
            try:
                await asyncio.shield(refund)
            except Exception as e:
                log.warning("valkey_ratelimit: a cancelled waiter's slot was not given back: %s", e)
            raise


class SlotSleep:
    """The booking call and the sleep of a waiter whose turn the server
    books. ``book`` just calls: a thread is not cancelled mid-call.
    ``sleep``: ``seconds`` by the monotonic clock; an exception raised into
    it (Ctrl-C's KeyboardInterrupt, a signal handler's) gives the slot
    back once, ``give_back()``, then goes on; a give-back that fails is
    logged."""

    @staticmethod
    def book(call: Callable[[], Any], give_back_late: Callable[[Any], Any]) -> Any:
        return call()

    @staticmethod
    def sleep(seconds: float, give_back: Callable[[], Any]) -> None:
        end = time.monotonic() + seconds
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return
                time.sleep(left)
        except BaseException:
            try:
                give_back()
            except Exception as e:
                log.warning("valkey_ratelimit: an interrupted waiter's slot was not given back: %s", e)
            raise

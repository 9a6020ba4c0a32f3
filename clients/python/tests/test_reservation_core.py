"""Waiting's pure core (``_reservation``) and its sleeps
(``_concurrency.AsyncSlotSleep`` / ``SlotSleep``), without a server: the
7-field reply and the RESP3 map, the sleep, the words of the booking and
of its cancel, which way a wait goes, and a cancel during the sleep giving
the slot back once."""

from __future__ import annotations

import asyncio
import time
from typing import List

import pytest

from valkey_ratelimit import Decision, Policy
from valkey_ratelimit._concurrency import AsyncSlotSleep, SlotSleep
from valkey_ratelimit._reservation import (
    give_back_args,
    is_reserve_unsupported,
    parse_reservation,
    reserve_args,
    sleep_s,
    wait_mode,
)


def test_the_seven_field_reply() -> None:
    d = parse_reservation([1, 1, 0, 0, 1000, 300, 1_700_000_000_300], "functions", 1000, None, "gcra")
    assert (d.admitted, d.shadow, d.retry_after_ms, d.delay_ms, d.at_ms) == (True, False, 0, 300, 1_700_000_000_300)
    assert d.window_ms == 1000 and d.backend == "functions"
    refused = parse_reservation([b"0", b"1", b"0", b"4200", b"4200", b"-1", b"-1"], "module", None, None, "gcra")
    assert (refused.admitted, refused.retry_after_ms, refused.delay_ms, refused.at_ms) == (False, 4200, -1, -1)


def test_a_leaky_admissions_delay_is_not_a_shadow_refusal() -> None:
    d = parse_reservation([1, 5, 0, 120, 600, 120, 1_700_000_000_120], "functions", 1000, None, "leaky")
    assert not d.shadow and d.retry_after_ms == 120 and d.delay_ms == 120


def test_the_resp3_map() -> None:
    fields = {
        b"admitted": 1,
        b"limit": 1,
        b"remaining": 0,
        b"retry_after_ms": 0,
        b"reset_after_ms": 1000,
        b"delay_ms": 250,
        b"at_ms": 1_700_000_000_250,
    }
    for reply in (fields, {k.decode(): v for k, v in fields.items()}):
        d = parse_reservation(reply, "module", 1000, "api", "gcra")
        assert (d.admitted, d.shadow, d.delay_ms, d.at_ms, d.name) == (True, False, 250, 1_700_000_000_250, "api")
    shadowed = parse_reservation({**fields, b"shadow": 1}, "module", 1000, None, "gcra")
    assert shadowed.shadow


@pytest.mark.parametrize(
    "reply",
    [[1, 1, 0, 0, 1000], [1, 1, 0, 0, 1000, 5], None, b"OK", {b"admitted": 1, b"limit": 1}],
)
def test_a_reply_of_neither_shape_is_refused(reply: object) -> None:
    with pytest.raises(ValueError):
        parse_reservation(reply, "module", None)


def test_the_sleep_is_a_booked_grants_delay() -> None:
    booked = Decision(True, 1, 0, 0, 1000, delay_ms=480, at_ms=5)
    assert sleep_s(booked) == 0.48
    assert sleep_s(Decision(True, 1, 0, 0, 1000, delay_ms=0, at_ms=5)) == 0
    assert sleep_s(Decision(False, 1, 0, 900, 1000, delay_ms=-1, at_ms=-1)) == 0
    assert sleep_s(Decision(True, 1, 0, 0, 1000)) == 0, "no booking asked"
    assert sleep_s(Decision(True, 1, 0, 50, 1000, shadow=True, delay_ms=50, at_ms=5)) == 0


def test_the_words_of_the_booking_and_of_its_cancel() -> None:
    args = Policy(10, 1000, "gcra", 1, penalty=500).args() + ["COST", "2"]
    assert reserve_args(args, 5000)[-2:] == ["RESERVE", "5000"]
    booked = Decision(True, 1, 0, 0, 1000, delay_ms=300, at_ms=1_700_000_000_300)
    assert give_back_args(args, booked) == [
        "ALGO", "gcra", "LIMIT", "10", "WINDOW", "1000", "BURST", "1", "PENALTY", "500", "COST", "2",
        "AT", "1700000000300",
    ]  # fmt: skip
    # A grant for now is given back with a plain refund.
    assert give_back_args(args, Decision(True, 1, 0, 0, 1000, delay_ms=0, at_ms=5)) == args
    assert give_back_args(args, Decision(True, 1, 0, 0, 1000)) == args


def test_which_way_a_wait_goes() -> None:
    assert wait_mode("gcra", None, "module", True) == "block"
    assert wait_mode("gcra", None, "functions", True) == "reserve"
    for algorithm in ("gcra", "token", "leaky"):
        for backend in ("module", "functions"):
            assert wait_mode(algorithm, None, backend, False) == "reserve"
    assert wait_mode("fixed", None, "module", False) == "retry"
    assert wait_mode("sliding", None, "functions", False) == "retry"
    assert wait_mode(None, None, "module", False) == "retry", "fixed is the default"
    assert wait_mode(None, "plans:pro", "functions", False) == "reserve-or-retry"


def test_which_errors_mean_reserve_cannot_apply() -> None:
    yes = (
        "RESERVE needs ALGO gcra, token or leaky: a window's count cannot book a slot in a later window",
        "unknown option 'RESERVE'",
    )
    for m in yes:
        assert is_reserve_unsupported(Exception(m)), m
    for m in ("RESERVE must be an integer from 0", "WRONGTYPE", "unknown option 'FOO'"):
        assert not is_reserve_unsupported(Exception(m)), m


def test_a_cancelled_async_sleep_gives_the_slot_back_once() -> None:
    given: List[int] = []

    async def give_back() -> None:
        await asyncio.sleep(0.01)
        given.append(1)

    async def main() -> None:
        t0 = time.monotonic()
        await AsyncSlotSleep.sleep(0.03, give_back)
        assert time.monotonic() - t0 >= 0.03 and given == []
        task = asyncio.ensure_future(AsyncSlotSleep.sleep(5, give_back))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert given == [1]

        async def failing() -> None:
            raise ConnectionError("down")

        task = asyncio.ensure_future(AsyncSlotSleep.sleep(5, failing))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task  # the cancel, not the give-back's failure

    asyncio.run(main())


def test_an_interrupted_sync_sleep_gives_the_slot_back_once(monkeypatch: pytest.MonkeyPatch) -> None:
    given: List[int] = []

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        SlotSleep.sleep(5, lambda: given.append(1))
    assert given == [1]
    SlotSleep.sleep(0, lambda: given.append(1))
    assert given == [1]


def test_a_booking_cancelled_before_its_reply_gives_back_what_it_booked() -> None:
    late: List[str] = []

    async def main() -> None:
        async def call() -> str:
            await asyncio.sleep(0.05)
            return "booked"

        async def give_back_late(answer: str) -> None:
            late.append(answer)

        assert await AsyncSlotSleep.book(call, give_back_late) == "booked" and late == []
        task = asyncio.ensure_future(AsyncSlotSleep.book(call, give_back_late))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)  # the call goes on, answers, and is given back
        assert late == ["booked"]

        async def failing() -> str:
            await asyncio.sleep(0.02)
            raise ConnectionError("down")

        task = asyncio.ensure_future(AsyncSlotSleep.book(failing, give_back_late))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.05)
        assert late == ["booked"], "a call that failed booked nothing"

    asyncio.run(main())
    assert SlotSleep.book(lambda: 7, lambda answer: late.append("never")) == 7

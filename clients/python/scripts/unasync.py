#!/usr/bin/env python3
"""Writes the synchronous limiter (src/valkey_ratelimit/_sync.py) from the
asyncio one (_aio.py), by a table of word substitutions, as httpcore's
unasync.py does: one source for both flavours.

    python3 clients/python/scripts/unasync.py            # regenerate _sync.py
    python3 clients/python/scripts/unasync.py --check    # fail if it is stale (make lint)

Only the standard library. A substitution applies to whole words (an
identifier is never cut in two), in the order of the table."""

from __future__ import annotations

import argparse
import difflib
import pathlib
import re
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "src" / "valkey_ratelimit"
SOURCE = PACKAGE / "_aio.py"
TARGET = PACKAGE / "_sync.py"

# (async words, sync words): whole-word regular expressions and their
# replacements, applied in order.
SUBSTITUTIONS = [
    # The module's opening: which flavour it is, and that it is generated.
    (r'^"""AsyncLimiter: the limiter on an asyncio client \(valkey-py\'s\n'
     r"valkey\.asyncio, redis-py's redis\.asyncio, valkey-glide's GlideClient\)",
     '"""Limiter: the limiter on a synchronous client (valkey-py\'s\n'
     "valkey.Valkey, redis-py's redis.Redis, valkey-glide's glide_sync)"),
    (r"This file is the source: _sync\.py is generated from it by\n"
     r"scripts/unasync\.py \(`make lint` checks that they agree\)\.",
     "GENERATED from _aio.py by scripts/unasync.py: edit _aio.py, then run\n"
     "`python3 clients/python/scripts/unasync.py` (`make lint` checks)."),
    # Names of the two flavours.
    (r"\bAsyncLimiter\b", "Limiter"),
    (r"\bAsyncHeldLease\b", "HeldLease"),
    (r"\bAsyncTransport\b", "Transport"),
    (r"\bAsyncGlideTransport\b", "GlideTransport"),
    (r"\bAsyncCaller\b", "Caller"),
    (r"\bAsyncBeats\b", "Beats"),
    (r"\bAsyncSlotSleep\b", "SlotSleep"),
    (r"\basynchronous=True\b", "asynchronous=False"),
    # The language.
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    # Sleeping (a waiting call's retries on the library).
    (r"^import asyncio\n", ""),
    (r"\basyncio\.sleep\b", "time.sleep"),
]


def unasync(text: str) -> str:
    for pattern, replacement in SUBSTITUTIONS:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    leftovers = sorted(set(re.findall(r"\b(?:async (?:def|with|for)|Async[A-Z]\w*)\b", text)))
    if leftovers:
        raise SystemExit(f"unasync: {', '.join(leftovers)} left in the generated text: extend SUBSTITUTIONS")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if _sync.py differs from what _aio.py gives")
    args = parser.parse_args()
    wanted = unasync(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        have = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if have != wanted:
            diff = difflib.unified_diff(have.splitlines(True), wanted.splitlines(True), str(TARGET), "unasync(_aio.py)")
            sys.stderr.write("".join(diff))
            sys.stderr.write(f"\n{TARGET} is stale: run python3 {pathlib.Path(__file__).as_posix()}\n")
            return 1
        return 0
    TARGET.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Whether Valkey answered a limiter's last call, so that each change is
logged once (through the ``valkey_ratelimit`` logger), not once per
request. Shared by both limiters; thread-safe."""

from __future__ import annotations

import logging
import threading
import time
from typing import Optional


class Health:
    """Whether Valkey answered the last call, so that each change is logged
    once, not once per request. Thread-safe."""

    def __init__(self, log: logging.Logger, failure: str) -> None:
        self._log = log
        self._failure = failure
        self._lock = threading.Lock()
        self._down_since: Optional[float] = None

    def down(self, error: BaseException) -> None:
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        self._log.warning(
            "valkey_ratelimit: Valkey is unreachable (%s: %s); admissions fail %s until it answers again",
            type(error).__name__,
            error,
            self._failure,
        )

    def up(self) -> None:
        if self._down_since is None:
            return
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            self._log.warning("valkey_ratelimit: Valkey answers again, after %.1f s unreachable", time.monotonic() - since)

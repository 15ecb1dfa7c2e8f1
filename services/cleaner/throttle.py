"""``log.cleaner.io.max.bytes.per.second`` for one worker (Kafka's Throttler, simplified).

Pure: ``delay_s`` says how long to pause after moving ``n`` more bytes so that the bytes moved
since the window started do not exceed the rate; the window restarts after each second of
observation so an idle spell does not bank credit. Time comes in as ``now_s``.
"""

from __future__ import annotations

import math


class Throttler:
    def __init__(self, bytes_per_second: float = math.inf, window_s: float = 1.0) -> None:
        if bytes_per_second <= 0:
            raise ValueError("log.cleaner.io.max.bytes.per.second must be > 0")
        self.rate = bytes_per_second
        self.window_s = window_s
        self._start: float | None = None
        self._bytes = 0

    def delay_s(self, n: int, now_s: float) -> float:
        if math.isinf(self.rate):
            return 0.0
        if self._start is None or now_s - self._start > self.window_s:
            self._start, self._bytes = now_s, 0
        self._bytes += n
        return max(0.0, self._bytes / self.rate - (now_s - self._start))

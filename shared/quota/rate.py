"""Kafka's windowed rate and throttle formula, with time passed in (milliseconds).

``SampledRate`` follows Kafka's ``SampledStat`` + ``Rate``: ``samples``
(``quota.window.num``, 11) samples of ``window_ms`` (``quota.window.size.seconds``,
1 s) each. A sample starts when the first value after the previous one's end
is recorded (not on a fixed grid); a sample older than ``samples × window_ms``
is reset before measuring. The rate is the sum of the samples divided by the
time since the oldest sample started, and **that time is at least
``samples − 1`` windows** while the first windows fill: a new client is
measured as if it had been idle for the rest of the window, so it is not
throttled for a first burst that a full window would allow.

``throttle_time_ms`` is Kafka's ``(O − T) / T × W``: how long the client must
stay silent for the rate over the (growing) window to fall back to the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

QUOTA_WINDOW_NUM = 11
QUOTA_WINDOW_SIZE_MS = 1000


@dataclass
class _Sample:
    start_ms: float
    value: float = 0.0


class SampledRate:
    """A rate per second over ``samples`` windows of ``window_ms``."""

    __slots__ = ("samples", "window_ms", "_samples", "_current")

    def __init__(self, samples: int = QUOTA_WINDOW_NUM, window_ms: int = QUOTA_WINDOW_SIZE_MS) -> None:
        if samples < 2 or window_ms <= 0:
            raise ValueError("a windowed rate needs at least 2 samples of a positive length")
        self.samples = samples
        self.window_ms = window_ms
        self._samples: list[_Sample] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            sample = self._advance(now_ms)
        sample.value += value

    def total(self, now_ms: float) -> float:
        """The sum over the live samples."""
        self._purge(now_ms)
        return sum(s.value for s in self._samples)

    def window_size_ms(self, now_ms: float) -> float:
        """The time the rate divides by: since the oldest sample started, padded to samples − 1 windows."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """The rate per second now."""
        return self.total(now_ms) / (self.window_size_ms(now_ms) / 1000.0)

    def idle(self, now_ms: float) -> bool:
        """True when nothing recorded is still inside the window (the rate can be forgotten)."""
        return self.total(now_ms) == 0.0

    def _current_sample(self, now_ms: float) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms))
        return self._samples[self._current]

    def _advance(self, now_ms: float) -> _Sample:
        self._current = (self._current + 1) % self.samples
        if self._current >= len(self._samples):
            sample = _Sample(now_ms)
            self._samples.append(sample)
        else:
            sample = self._samples[self._current]
            sample.start_ms, sample.value = now_ms, 0.0
        return sample

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        for s in self._samples:
            if now_ms - s.start_ms >= expire:
                s.start_ms, s.value = now_ms, 0.0


def throttle_time_ms(rate: float, bound: float, window_ms: float) -> int:
    """Kafka's throttle time for a measured ``rate`` over ``bound``: (O − T) / T × W, 0 when within."""
    if rate <= bound or bound <= 0:
        return 0
    return round((rate - bound) / bound * window_ms)


def credit(total: float, bound: float, window_ms: float) -> float:
    """How much more can be recorded now before the rate passes ``bound``: T × W − recorded."""
    return max(0.0, bound * window_ms / 1000.0 - total)


class Smoother:
    """A token bucket at the quota's rate holding at most ``burst_ms`` of it: how much a group may
    use before the next decision. An overshoot leaves it negative (the group waits ``wait_ms``),
    by at most ``debt_ms`` worth (the quota window: older debt is the windowed rate's business)."""

    __slots__ = ("burst_ms", "debt_ms", "level", "last_ms")

    def __init__(self, burst_ms: float, debt_ms: float, now_ms: float) -> None:
        self.burst_ms = burst_ms
        self.debt_ms = debt_ms
        self.level = float("inf")  # full: the first update caps it
        self.last_ms = now_ms

    def update(self, bound: float, now_ms: float, used: float = 0.0) -> float:
        """Refill at ``bound`` per second since the last update, take ``used``; return the level."""
        cap = bound * self.burst_ms / 1000.0
        level = min(cap, self.level + bound * max(0.0, now_ms - self.last_ms) / 1000.0) - used
        self.level = max(-bound * self.debt_ms / 1000.0, level)
        self.last_ms = now_ms
        return self.level

    def wait_ms(self, bound: float) -> int:
        """How long until the bucket is back to zero at ``bound`` per second."""
        return round(-self.level / bound * 1000.0) if self.level < 0 and bound > 0 else 0

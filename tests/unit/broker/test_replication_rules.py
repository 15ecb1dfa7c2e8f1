"""The broker's replication rules (services/broker/replication_rules.py), pure, with a fake clock:
high watermark over the ISR, ISR expansion and shrink (replica.lag.time.max.ms), and where a follower
truncates after OffsetsForLeaderEpoch."""

from __future__ import annotations

from services.broker.replication_rules import (
    FollowerState,
    epoch_end_offset,
    high_watermark,
    isr_expansion_candidates,
    isr_shrink_candidates,
    truncation_offset,
)

LAG_MS = 10_000  # replica.lag.time.max.ms


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def advance(self, ms: int) -> int:
        self.now_ms += ms
        return self.now_ms


def test_high_watermark_is_the_smallest_log_end_over_the_isr() -> None:
    followers = {2: FollowerState(log_end_offset=7), 3: FollowerState(log_end_offset=4)}
    assert high_watermark(1, 10, 0, [1, 2, 3], None, followers) == 4
    assert high_watermark(1, 10, 0, [1, 2], None, followers) == 7  # 3 outside the ISR does not hold it back
    assert high_watermark(1, 10, 0, [1], None, followers) == 10  # alone in the ISR: its own log end


def test_high_watermark_with_an_isr_change_in_flight_uses_the_union() -> None:
    followers = {2: FollowerState(log_end_offset=7), 3: FollowerState(log_end_offset=4)}
    # Shrinking to [1, 2] is not committed yet: 3 still counts, so no record is acknowledged that a
    # leader elected from the old ISR could lack.
    assert high_watermark(1, 10, 0, [1, 2, 3], [1, 2], followers) == 4
    # Expanding to [1, 2, 3] is proposed: 3 counts already.
    assert high_watermark(1, 10, 0, [1, 2], [1, 2, 3], followers) == 4


def test_high_watermark_never_below_log_start_and_a_silent_isr_member_holds_it() -> None:
    assert high_watermark(1, 10, 6, [1, 2], None, {2: FollowerState(log_end_offset=3)}) == 6
    assert high_watermark(1, 10, 0, [1, 2], None, {}) == 0  # 2 never fetched: -1, floored at log start


def test_isr_shrinks_a_follower_not_caught_up_for_lag_time_max() -> None:
    clock = FakeClock()
    followers = {2: FollowerState(10, clock.now_ms, clock.now_ms), 3: FollowerState(10, clock.now_ms, clock.now_ms)}
    assert isr_shrink_candidates(clock.advance(LAG_MS), 1, [1, 2, 3], followers, LAG_MS) == []
    followers[2].last_caught_up_ms = clock.now_ms  # 2 keeps up, 3 fetches but stays behind
    followers[3].last_fetch_ms = clock.now_ms
    assert isr_shrink_candidates(clock.advance(1), 1, [1, 2, 3], followers, LAG_MS) == [3]
    assert isr_shrink_candidates(clock.now_ms, 1, [1, 4], {}, LAG_MS) == [4]  # never fetched


def test_isr_expands_a_follower_caught_up_to_the_hw_and_the_epoch_start_recently() -> None:
    clock = FakeClock()
    now = clock.now_ms
    followers = {3: FollowerState(log_end_offset=8, last_fetch_ms=now, last_caught_up_ms=now)}
    assert isr_expansion_candidates(now, [1, 2], followers, 8, 5, LAG_MS) == [3]
    assert isr_expansion_candidates(now, [1, 2], followers, 9, 5, LAG_MS) == []  # below the HW
    assert isr_expansion_candidates(now, [1, 2], followers, 8, 9, LAG_MS) == []  # not into this epoch yet
    assert isr_expansion_candidates(now, [1, 2, 3], followers, 8, 5, LAG_MS) == []  # already in
    later = clock.advance(LAG_MS // 2)  # caught up, but longer ago than half the lag time
    assert isr_expansion_candidates(later, [1, 2], followers, 8, 5, LAG_MS) == []


EPOCHS = [(0, 0), (2, 10), (5, 30)]  # epoch 0 wrote 0..9, epoch 2 wrote 10..29, epoch 5 from 30


def test_epoch_end_offset_answers_offsets_for_leader_epoch() -> None:
    assert epoch_end_offset(EPOCHS, 0, 40) == (0, 10)
    assert epoch_end_offset(EPOCHS, 1, 40) == (0, 10)  # largest epoch <= 1
    assert epoch_end_offset(EPOCHS, 2, 40) == (2, 30)
    assert epoch_end_offset(EPOCHS, 7, 40) == (5, 40)  # the latest epoch ends at the log end
    assert epoch_end_offset([(3, 5)], 2, 40) == (-1, -1)
    assert epoch_end_offset([], 2, 40) == (-1, -1)


def test_follower_truncates_its_divergent_tail() -> None:
    # The follower wrote 30..44 in epoch 5; the new leader says epoch 5 ended at 35 on its side.
    assert truncation_offset(EPOCHS, 45, 20, 5, 35) == 35
    # The leader's last epoch <= ours is 2, ending at 28: our epoch-2 records end at 30, so cut at 28.
    assert truncation_offset(EPOCHS, 45, 20, 2, 28) == 28
    # The leader has more of epoch 2 than we do: cut where our epoch 2 ended (30), the rest diverged.
    assert truncation_offset(EPOCHS, 45, 20, 2, 33) == 30
    # Nothing diverges: the leader's epoch ends past our log end.
    assert truncation_offset(EPOCHS, 45, 20, 5, 50) == 45


def test_follower_without_common_epoch_keeps_only_what_was_committed() -> None:
    assert truncation_offset(EPOCHS, 45, 20, -1, -1) == 20
    assert truncation_offset([], 45, 20, 5, 10) == 45  # no epoch history: keep it, fetch decides

"""Process tuning the clients apply: only over Python's defaults, never over an application's choice."""

from __future__ import annotations

import gc
import sys

from shared.runtime import tune_gc, tune_switch_interval


def test_switch_interval_is_lowered_only_from_the_default() -> None:
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert tune_switch_interval() and sys.getswitchinterval() == 0.0005
        sys.setswitchinterval(0.002)  # the application's own choice stays
        assert not tune_switch_interval() and sys.getswitchinterval() == 0.002
    finally:
        sys.setswitchinterval(before)


def test_gc_threshold_is_raised_only_from_the_default() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        assert tune_gc() and gc.get_threshold() == (10_000, 10, 10)
        gc.set_threshold(2_000, 5, 5)
        assert not tune_gc() and gc.get_threshold() == (2_000, 5, 5)
    finally:
        gc.set_threshold(*before)

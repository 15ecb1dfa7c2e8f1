"""`tidelog consume --group` stopped by SIGTERM (`kill PID`) stops like Ctrl-C: its finally closes the
consumer, which leaves the group at once instead of holding the partitions for the session timeout."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from shared.cli.produce_consume import sigterm_as_interrupt


def test_sigterm_raises_keyboard_interrupt_inside_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    closed = []
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            threading.Event().wait(1)  # the handler runs at the next bytecode: never reached
        finally:
            closed.append(True)
    assert closed == [True]
    assert signal.getsignal(signal.SIGTERM) is before


def test_outside_the_main_thread_nothing_is_installed() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen = []

    def run() -> None:
        with sigterm_as_interrupt():
            seen.append(signal.getsignal(signal.SIGTERM))

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert seen == [before]

"""Free grpc's streaming call objects while every thread still runs, never at interpreter exit.

A streaming call (``grpc._channel._MultiThreadedRendezvous``) takes its lock in ``__del__``. grpc's own
daemon threads (the one consuming a request iterator, the channel poller) hold that lock for a moment
while they finish a call's last operations. At exit, Python stops daemon threads where they stand, lock
held, and then frees what their frames and the modules still reference, on the main thread: a call freed
then waits for that lock forever. The process hung after its last line (the README snippet: about one
run in 100, one in 30 with a short ``sys.setswitchinterval``).

So the client drops its references to a call when it closes it, joins the thread that reads it, and
cuts the reference cycle that a failed call leaves (``forget_traceback``), so that nothing but the
cyclic garbage collector, which may run at exit, would free it."""

from __future__ import annotations


def forget_traceback(exc: BaseException) -> None:
    """A streaming call's ``RpcError`` is the call object itself, and its traceback holds the frames that
    hold the call: a cycle only the cyclic collector frees, possibly at exit. Cut it (the error's code
    and details stay)."""
    exc.__traceback__ = None

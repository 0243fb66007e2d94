"""Processes: dying with the parent, their stacks on request, and how a process ended, in words.

Standard library only: both sides use it (the plugin watching a run, a run watching its ranks).
"""

from __future__ import annotations

import ctypes
import faulthandler
import signal

#: prctl(2) option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: Asks a run's process for its threads' Python stacks (:func:`stacks_on_request`): the
#: plugin sends it to each process of a run that timed out, before stopping them.
STACKS_SIGNAL = signal.SIGUSR1
#: The environment variable that sizes inductor's pool of compile workers: torch reads it once,
#: when ``torch._inductor.config`` is imported (a forked run sets the value itself).
COMPILE_THREADS_ENV = "TORCHINDUCTOR_COMPILE_THREADS"


def stacks_on_request() -> None:
    """On :data:`STACKS_SIGNAL`, write every thread's Python stack to stderr (the run's
    output), and go on (faulthandler). Inherited by the processes forked after it (ranks).
    Nothing where stderr is no file (closed, or replaced by one in memory)."""
    try:
        faulthandler.register(STACKS_SIGNAL, all_threads=True)
    except (RuntimeError, ValueError, OSError):  # None; io.UnsupportedOperation: no fileno()
        pass


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the process that started it dies."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def signal_name(returncode: int | None) -> str | None:
    """``-11`` → ``"SIGSEGV"``; None for a process that exited (or has not)."""
    if returncode is None or returncode >= 0:
        return None
    known = -returncode in signal.valid_signals()
    return signal.Signals(-returncode).name if known else f"signal {-returncode}"


def exit_description(returncode: int) -> str:
    """``"was killed by SIGSEGV"`` or ``"exited with status 3"``."""
    name = signal_name(returncode)  # None: it exited
    return f"was killed by {name}" if name else f"exited with status {returncode}"

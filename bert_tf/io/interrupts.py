"""Ctrl-C and SIGTERM held back while a step that must not be cut in the middle runs.

An exception raised inside TensorFlow's checkpoint save (KeyboardInterrupt from Ctrl-C, SystemExit
from cli's SIGTERM handler) unwinds its device scopes out of order and ends in a RuntimeError
traceback instead of the one-line interrupt. Within `deferred()` the signals are only noted; when
the block ends, the first one noted acts as it would have, through the handler that was in place.
"""
import contextlib
import os
import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def deferred():
  """`with deferred():` the block runs to its end whatever Ctrl-C or SIGTERM comes meanwhile; then
  the signal acts (KeyboardInterrupt, cli's SystemExit, or the default action). Outside the main
  thread, where handlers cannot be set, the block runs as it is."""
  if threading.current_thread() is not threading.main_thread():
    yield
    return
  received = []
  previous = {signum: signal.getsignal(signum) for signum in _SIGNALS}
  for signum in _SIGNALS:
    signal.signal(signum, lambda number, unused_frame: received.append(number))
  try:
    yield
  finally:
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  if received:
    _act(received[0], previous[received[0]])


def _act(signum, handler):
  if callable(handler):
    handler(signum, None)
  elif handler == signal.SIG_DFL:
    os.kill(os.getpid(), signum)

"""Ctrl-C and SIGTERM held back while a step that must not be cut in the middle runs (deferred),
and SIGTERM noted while a training loop runs, to stop it at the step in flight and save that step
(noted: how GCE and TPU VMs announce a preemption, about 30 s ahead).

An exception raised inside TensorFlow's checkpoint save (KeyboardInterrupt from Ctrl-C, SystemExit
from cli's SIGTERM handler) unwinds its device scopes out of order and ends in a RuntimeError
traceback instead of the one-line interrupt. Within `deferred()` the signals are only noted; when
the block ends, the first one noted acts as it would have, through the handler that was in place.
"""
import _thread
import contextlib
import os
import signal
import sys
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


class Notice:
  """What noted() yields: the signals received (signum, in order) and act(), which makes the first
  act (or `signum`, when none came: a peer's notice) through the handler that was in place."""

  def __init__(self, previous):
    self.received = []
    self._previous = previous
    self._acted = False

  def act(self, signum=None):
    signum = self.received[0] if self.received else signum
    if signum is not None and not self._acted:
      self._acted = True
      _act(signum, self._previous.get(signum, signal.getsignal(signum)))


@contextlib.contextmanager
def noted(on_signal, signals=(signal.SIGTERM,)):
  """`with noted(on_signal) as notice:` SIGTERM is noted in notice.received, not acted on, and
  on_signal(signum) is called at once from a thread of its own, even while the main thread is
  inside a long native call (a training loop's tf.function, where a Python handler waits for it
  to return): a training loop stops at the step in flight, saves it and then calls
  notice.act(). When the block ends without an exception and a signal was noted, it acts then.
  Outside the main thread the block runs as it is (notice.received stays empty)."""
  if threading.current_thread() is not threading.main_thread():
    yield Notice({})
    return
  # A signal the process was started ignoring stays ignored.
  signals = tuple(s for s in signals if signal.getsignal(s) is not signal.SIG_IGN)
  previous = {signum: signal.getsignal(signum) for signum in signals}
  notice = Notice(previous)
  for signum in signals:
    signal.signal(signum, lambda number, unused_frame: notice.received.append(number))
  read, write = os.pipe()
  os.set_blocking(write, False)
  # The C-level handler writes each signal's number here as it comes, before Python's runs.
  wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
  watcher = threading.Thread(target=_watch, args=(read, signals, on_signal), daemon=True,
                             name="bert_tf-signal-notice")
  watcher.start()
  try:
    yield notice
  finally:
    signal.set_wakeup_fd(wakeup)
    os.close(write)  # the watcher reads the end of the pipe and stops
    watcher.join(timeout=5)
    for signum, handler in previous.items():
      signal.signal(signum, handler)
  notice.act()


def _watch(read, signals, on_signal):
  try:
    while True:
      data = os.read(read, 64)
      if not data:
        return
      for signum in data:
        if signum in signals:
          on_signal(signum)
  finally:
    os.close(read)


_redelivered = {}
_REDELIVERY_SECONDS = 0.01


def redeliver_swallowed(kinds):
  """Makes a signal's exception that Python would swallow raise again: `kinds` is {exception
  type: the signal that raises it} (KeyboardInterrupt: SIGINT). Raised where it cannot propagate
  (a weakref callback, a __del__, a garbage collector's callback, which a model's loading runs
  by the thousand), Python only prints "Exception ignored in ..." and goes on, and the Ctrl-C is
  lost; here sys.unraisablehook makes the signal pending again a moment later, from a thread
  (at once, the handler would run inside the hook, and be swallowed again), so its handler runs
  again once the main thread is back in code where an exception propagates. Other
  unraisable exceptions go to the hook that was in place. Installed once; later calls add
  kinds."""
  _redelivered.update(kinds)
  if getattr(sys.unraisablehook, "_bert_tf_redelivers", False):
    return
  previous = sys.unraisablehook

  def hook(unraisable):
    for kind, signum in _redelivered.items():
      if unraisable.exc_type is not None and issubclass(unraisable.exc_type, kind):
        timer = threading.Timer(_REDELIVERY_SECONDS, _thread.interrupt_main, args=(signum,))
        timer.daemon = True
        timer.start()
        return
    previous(unraisable)

  hook._bert_tf_redelivers = True  # pylint: disable=protected-access
  sys.unraisablehook = hook

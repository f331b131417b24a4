"""Worker processes for create_pretraining_data: forked, so that they inherit their data (a
tokenizer, the corpus's token ids) without pickling it; ended with their parent however it ends;
and a dead worker turned into the run's error instead of a wait that never ends.

What the workers inherit is handed to ForkedWorkers explicitly, and each task receives it as its
first argument: function(inherited, *args).
"""
import collections
import concurrent.futures
import contextlib
import multiprocessing
import os
import signal

_NOTHING = object()
# What the workers of the open ForkedWorkers inherit; set before they fork, in the parent only
# while the pool is open. Only _call reads it, in a worker.
_inherited = _NOTHING


def _call(function, args):
  return function(_inherited, *args)


class ForkedWorkers:
  """`num_workers` processes that run function(inherited, *args) for each submit.

  They fork at the first submit (and later, as the executor adds them), each inheriting `inherited`
  as it is in the parent at that moment. Unlike multiprocessing.Pool, which waits forever for the
  task of a worker that was killed (e.g. out of memory), the executor fails that worker's tasks
  (see if_a_worker_dies). Each worker ends with the process that forked it (die_with_parent). One
  pool is open at a time.
  """

  def __init__(self, num_workers, inherited=None):
    global _inherited
    if _inherited is not _NOTHING:
      raise RuntimeError("one ForkedWorkers at a time")
    _inherited = inherited
    self._executor = concurrent.futures.ProcessPoolExecutor(
        num_workers, mp_context=multiprocessing.get_context("fork"), initializer=die_with_parent,
        initargs=(os.getpid(),))

  def submit(self, function, *args):
    return self._executor.submit(_call, function, args)

  def shutdown(self):
    global _inherited
    try:
      self._executor.shutdown(wait=True, cancel_futures=True)
    finally:
      _inherited = _NOTHING

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.shutdown()


def die_with_parent(parent_pid):
  """In a worker: asks Linux for SIGKILL when the parent dies (PR_SET_PDEATHSIG), so a killed run
  leaves no worker behind; SIGTERM and SIGINT are the parent's to handle."""
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass  # not Linux: workers still end when their queue closes
  if os.getppid() != parent_pid:  # the parent died before prctl took effect
    os._exit(1)  # pylint: disable=protected-access


@contextlib.contextmanager
def if_a_worker_dies(doing):
  try:
    yield
  except concurrent.futures.process.BrokenProcessPool as e:
    raise RuntimeError(f"a worker process {doing} died (killed, or out of memory?); nothing was "
                       f"written") from e


def in_order_in_workers(function, items, num_workers, doing, inherited=None):
  """function(inherited, item) for each item, in order, computed by forked workers, with at most 2
  items a worker in flight so that memory stays bounded."""
  in_flight = collections.deque()
  with ForkedWorkers(num_workers, inherited) as workers, if_a_worker_dies(doing):
    for item in items:
      in_flight.append(workers.submit(function, item))
      if len(in_flight) >= 2 * num_workers:
        yield in_flight.popleft().result()
    while in_flight:
      yield in_flight.popleft().result()

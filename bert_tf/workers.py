"""Worker processes for create_pretraining_data: forked (they inherit the parent's data without
pickling it), ended with their parent however it ends, and a dead worker turned into the run's
error instead of a wait that never ends."""
import collections
import concurrent.futures
import contextlib
import multiprocessing
import os
import signal


def forked_workers(num_workers):
  """Worker processes that inherit the module's state (tokenizer, tokens) without pickling it; they
  fork at the first submit. Unlike multiprocessing.Pool, which waits forever for the task of a worker
  that was killed (e.g. out of memory), the executor fails that worker's tasks (see if_a_worker_dies).
  Each worker ends with the process that forked it, however that one ends (die_with_parent)."""
  return concurrent.futures.ProcessPoolExecutor(
      num_workers, mp_context=multiprocessing.get_context("fork"), initializer=die_with_parent,
      initargs=(os.getpid(),))


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


def in_order_in_workers(function, items, num_workers, doing):
  """function(item) for each item, in order, computed by forked workers, with at most 2 items a
  worker in flight so that memory stays bounded."""
  workers = forked_workers(num_workers)
  in_flight = collections.deque()
  try:
    with if_a_worker_dies(doing):
      for item in items:
        in_flight.append(workers.submit(function, item))
        if len(in_flight) >= 2 * num_workers:
          yield in_flight.popleft().result()
      while in_flight:
        yield in_flight.popleft().result()
  finally:
    workers.shutdown(wait=True, cancel_futures=True)

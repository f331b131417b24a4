import os
import signal
import time

import pytest

from bert_tf.io import interrupts


@pytest.fixture(autouse=True)
def _ctrl_c_raises():
  """Ctrl-C as a terminal's foreground process has it (KeyboardInterrupt), whatever this process
  inherited: a background job (`make test &`) starts with SIGINT ignored."""
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)
  yield
  signal.signal(signal.SIGINT, previous)


def test_ctrl_c_inside_the_block_acts_when_it_ends():
  done = []
  with pytest.raises(KeyboardInterrupt):
    with interrupts.deferred():
      os.kill(os.getpid(), signal.SIGINT)
      time.sleep(0.05)  # the signal has arrived: it must not cut the block
      done.append("whole")
  assert done == ["whole"]
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_sigterm_goes_to_the_handler_in_place_after_the_block():
  seen = []
  previous = signal.signal(signal.SIGTERM, lambda number, frame: seen.append(number))
  try:
    with interrupts.deferred():
      os.kill(os.getpid(), signal.SIGTERM)
      time.sleep(0.05)
      assert not seen
    assert seen == [signal.SIGTERM]
  finally:
    signal.signal(signal.SIGTERM, previous)


def test_a_block_without_signals_changes_nothing():
  with interrupts.deferred():
    pass
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

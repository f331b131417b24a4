import os
import signal
import subprocess
import sys
import time

import pytest

from bert_tf.training import interrupts
from support.paths import REPO


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


# ------------------------------------------------------------------------------------------------
# Ctrl-C and SIGTERM at start-up, while a script still imports TensorFlow (seconds), through a
# real process: one line and the signal's status, never the traceback of the import it cut.

_LINES = {signal.SIGINT: "interrupted: stopped while starting: nothing was written",
          signal.SIGTERM: "terminated: stopped while starting: nothing was written"}


def _as_a_terminal_starts_it():
  """In the child: both signals' default actions, whatever this process inherited."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _start(args, **kwargs):
  return subprocess.Popen([sys.executable, *args], cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, **kwargs)


def _caught(pid):
  """The signals a process has handlers for (/proc/<pid>/status SigCgt)."""
  with open(f"/proc/{pid}/status") as f:
    mask = int(next(line for line in f if line.startswith("SigCgt:")).split()[1], 16)
  return {signum for signum in (signal.SIGINT, signal.SIGTERM) if mask >> (signum - 1) & 1}


def _loading_tensorflow(pid):
  with open(f"/proc/{pid}/maps") as f:
    return "tensorflow" in f.read()


@pytest.mark.parametrize("signum,when", [(signal.SIGINT, "handlers set"),
                                         (signal.SIGINT, "tensorflow loading"),
                                         (signal.SIGTERM, "tensorflow loading")])
def test_a_signal_while_tensorflow_loads_is_one_line(tmp_path, signum, when):
  process = _start(["run_classifier.py", "--task_name=MRPC", f"--data_dir={tmp_path}",
                    f"--vocab_file={tmp_path}/v.txt", f"--bert_config_file={tmp_path}/c.json",
                    f"--output_dir={tmp_path}/out", "--do_train"],
                   preexec_fn=_as_a_terminal_starts_it)
  ready = {"handlers set": lambda: signal.SIGTERM in _caught(process.pid),
           "tensorflow loading": lambda: _loading_tensorflow(process.pid)}[when]
  deadline = time.monotonic() + 60
  while not ready() and time.monotonic() < deadline:
    assert process.poll() is None, process.stderr.read()[-3000:]
    time.sleep(0.005)
  assert process.poll() is None, "ended before the signal: start-up was not under way"
  process.send_signal(signum)
  _, stderr = process.communicate(timeout=120)
  assert process.returncode == 128 + signum, stderr[-3000:]
  assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
  assert stderr.strip().splitlines()[-1] == _LINES[signum], stderr[-3000:]
  assert os.listdir(tmp_path) == []


_CATCH_THEN_SIGNAL = ("import os, signal, sys, time; sys.path.insert(0, {repo!r}); "
                      "from bert_tf.cli import app; app.catch_startup_signals(); "
                      "os.kill(os.getpid(), signal.{name}); time.sleep(30); print('went on')")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_startup_handlers_print_one_line_and_the_status(signum):
  process = _start(["-c", _CATCH_THEN_SIGNAL.format(repo=REPO, name=signal.Signals(signum).name)],
                   preexec_fn=_as_a_terminal_starts_it)
  _, stderr = process.communicate(timeout=60)
  assert process.returncode == 128 + signum
  assert stderr == _LINES[signum] + "\n"


def test_a_signal_the_process_was_started_ignoring_stays_ignored():
  """A background job (`run_pretraining.py ... &` in a non-interactive shell) starts with SIGINT
  ignored: start-up must not make Ctrl-C of the terminal's foreground job stop it."""
  code = _CATCH_THEN_SIGNAL.format(repo=REPO, name="SIGINT").replace("time.sleep(30)",
                                                                      "time.sleep(0.2)")
  process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                        signal.SIG_IGN))
  assert process.returncode == 0 and process.stdout == "went on\n", process.stderr

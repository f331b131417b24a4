"""Preemption, lost workers and interrupts: SIGTERM (how GCE and TPU VMs announce a preemption)
saves the step in flight of every training script and a rerun resumes exactly; a multi-worker run whose
peer is terminated, killed or never starts ends in bounded time with one line naming it, and a
rerun resumes; Ctrl-C is never lost at any moment of start-up; two exports in one second take two
versions.

One tiny world is made once: a vocabulary, a config (with dropout: its random state must resume
too), MRPC-format data, pretraining records and a fine-tuned classifier (itself trained through a
SIGTERM and a rerun), the teacher of the distilled runs. The scenarios then run as subprocesses,
two at a time; each test reads what its scenario saw.
"""
import concurrent.futures
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from support import faults
from support.paths import REPO
from support.script_runner import run_script
from support.started_scripts import start_script

WORDS, VOCAB, CONFIG = faults.RUN_WORDS, faults.RUN_VOCAB, faults.RUN_CONFIG
# The one line a run stopped by SIGTERM ends with (cli.app), naming the checkpoint it saved.
TERMINATED = (r"terminated: the latest checkpoint, (?P<checkpoint>.*/model\.ckpt-(?P<step>\d+)), "
              r"is kept \(a rerun resumes from it\); nothing half-written is left")
PRETRAINING_STEPS = 300
MULTI_WORKER_STEPS = 24
# The bound of the multi-worker runs (--worker_timeout_seconds), and what a run may take beyond it
# on a loaded 2-core machine (TensorFlow's start, the coordination service's own shutdown).
BOUND, SLACK = 8, 60
# Ctrl-C at these moments after a distilled run starts (its teacher's model loading among them).
DELAYS = sorted(round(random.Random(56).uniform(0.05, 3.0), 2) for _ in range(6))


def pretraining_flags(w, output_dir, *extra):
  return [f"--input_file={w['records']}", f"--output_dir={output_dir}",
          f"--bert_config_file={w['config']}", f"--vocab_file={w['vocab']}", "--do_train",
          "--max_seq_length=32", "--max_predictions_per_seq=5", "--train_batch_size=4",
          "--num_warmup_steps=10", *extra]


def classifier_flags(w, output_dir, *extra):
  return ["--task_name=MRPC", f"--data_dir={w['mrpc']}", f"--vocab_file={w['vocab']}",
          f"--bert_config_file={w['config']}", "--max_seq_length=32", "--train_batch_size=4",
          "--do_train", f"--output_dir={output_dir}", "--save_checkpoints_steps=100000", *extra]


def _lines_until(started, pattern, timeout=240):
  """started's stderr lines up to the first that matches `pattern` (all of them if it ends)."""
  lines, deadline = [], time.monotonic() + timeout
  for line in started.stderr:
    lines.append(line.rstrip("\n"))
    if re.search(pattern, line) or time.monotonic() > deadline:
      break
  return lines


def _stop(started, pattern, signum, times=1):
  """Waits for `pattern` in started's stderr, sends signum (times, 50 ms apart); returns (exit
  status, stderr lines, seconds from the signal to the end)."""
  lines = _lines_until(started, pattern)
  for i in range(times):
    if i:
      time.sleep(0.05)
    os.kill(started.pid, signum)
  sent = time.monotonic()
  returncode = started.wait(timeout=240)
  return returncode, lines + started.stderr.read().splitlines(), time.monotonic() - sent


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults_preempt")
  w = faults.make_world(root, VOCAB, CONFIG, WORDS, mrpc_rows=16)
  w["records"] = faults.pretraining_records(root / "pre.tfrecord", [32] * 64, len(VOCAB))
  # The teacher: fine-tuned, stopped by SIGTERM after its first steps, and finished by a rerun.
  w["teacher"] = root / "teacher"
  flags = classifier_flags(w, w["teacher"], "--num_train_epochs=20", "--log_steps=4")
  w["teacher_stopped"] = _stop(start_script("run_classifier.py", *flags), r" step \d+/80 ",
                               signal.SIGTERM)
  w["teacher_resumed"] = run_script("run_classifier.py", *flags, timeout=300)
  return w


# ------------------------------------------------------------------------------------------------
# The scenarios: each returns what it saw.


def _pretraining(w):
  """An uninterrupted run, and one stopped by two SIGTERMs in the middle of a chunk of steps,
  then run again with the same flags."""
  flags = ["--num_train_steps=%d" % PRETRAINING_STEPS, "--save_checkpoints_steps=100000",
           "--iterations_per_loop=100000", "--log_steps=20"]
  straight = run_script("run_pretraining.py",
                        *pretraining_flags(w, w["root"] / "straight", *flags), timeout=300)
  stopped_dir = w["root"] / "stopped"
  stopped = _stop(start_script("run_pretraining.py", *pretraining_flags(w, stopped_dir, *flags)),
                  r" step 40/", signal.SIGTERM, times=2)
  saved = sorted(os.listdir(stopped_dir))
  resumed = run_script("run_pretraining.py", *pretraining_flags(w, stopped_dir, *flags),
                       timeout=300)
  return {"straight": straight, "stopped": stopped, "saved": saved, "resumed": resumed}


def _free_ports(count):
  ports = []
  for _ in range(count):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      ports.append(s.getsockname()[1])
  return ports


def _workers(w, output_dir, ports, indexes=(0, 1), *extra):
  cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
  started = []
  for index in indexes:
    env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster,
                                                 "task": {"type": "worker", "index": index}}))
    started.append(start_script("run_pretraining.py", *pretraining_flags(
        w, output_dir, f"--num_train_steps={MULTI_WORKER_STEPS}", "--save_checkpoints_steps=3",
        "--iterations_per_loop=3", "--distribution_strategy=multi_worker_mirrored",
        f"--worker_timeout_seconds={BOUND}", *extra), env=env))
  return started


def _finish(started):
  return [(s.wait(timeout=240), s.stderr.read().splitlines()) for s in started]


def _multi_worker(w):
  """Two workers: worker 1 terminated (SIGTERM) after their first checkpoint; both again, worker
  1 killed (SIGKILL) after a checkpoint more; both again, to the end. Then worker 0 alone."""
  out = w["root"] / "mw"
  seen = {}
  chief, peer = _workers(w, out, _free_ports(2))
  chief_lines = _lines_until(chief, r"Saved checkpoint")
  seen["terminated"] = (_stop(peer, r"", signal.SIGTERM),
                        (chief.wait(timeout=240), chief_lines + chief.stderr.read().splitlines()))
  chief, peer = _workers(w, out, _free_ports(2))
  chief_lines = _lines_until(chief, r"Resuming from")
  chief_lines += _lines_until(chief, r"Saved checkpoint")
  os.kill(peer.pid, signal.SIGKILL)
  killed = time.monotonic()
  seen["killed"] = (chief.wait(timeout=240), chief_lines + chief.stderr.read().splitlines(),
                    time.monotonic() - killed, peer.wait(timeout=60))
  seen["rerun"] = _finish(_workers(w, out, _free_ports(2)))
  start = time.monotonic()
  alone, = _workers(w, w["root"] / "alone", _free_ports(2), (0,))
  seen["alone"] = _finish([alone])[0] + (time.monotonic() - start,)
  return seen


def _distilled(w):
  """A distilled student stopped by SIGTERM after its first steps, then run again."""
  flags = classifier_flags(w, w["root"] / "student", f"--teacher_dir={w['teacher']}",
                           "--num_train_epochs=20", "--log_steps=4")
  stopped = _stop(start_script("run_classifier.py", *flags), r" step \d+/80 ", signal.SIGTERM)
  return {"stopped": stopped, "resumed": run_script("run_classifier.py", *flags, timeout=300)}


def _ctrl_c(w, delay):
  flags = classifier_flags(w, w["root"] / f"ctrl_c_{delay}", f"--teacher_dir={w['teacher']}",
                           "--num_train_epochs=100000")
  started = start_script("run_classifier.py", *flags)
  time.sleep(delay)
  os.kill(started.pid, signal.SIGINT)
  return started.wait(timeout=240), started.stderr.read()


def _exports(w):
  """Two exports at once into one export_dir whose newest version is a number ahead of the clock:
  both compute the same next version."""
  export_dir = w["root"] / "export"
  ahead = export_dir / str(int(time.time()) + 1000)
  ahead.mkdir(parents=True)
  (ahead / "saved_model.pb").write_bytes(b"someone else's")
  flags = ["--task=classifier", "--task_name=MRPC", f"--vocab_file={w['vocab']}",
           f"--bert_config_file={w['config']}", f"--init_checkpoint={w['teacher']}",
           f"--export_dir={export_dir}", "--max_seq_length=32"]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    done = list(pool.map(lambda _: run_script("export_savedmodel.py", *flags, timeout=300),
                         range(2)))
  return {"done": done, "ahead": ahead, "export_dir": export_dir}


@pytest.fixture(scope="module")
def seen(world):
  scenarios = {"pretraining": _pretraining, "multi_worker": _multi_worker,
               "distilled": _distilled, "exports": _exports,
               **{f"ctrl_c_{delay}": (lambda w, d=delay: _ctrl_c(w, d)) for delay in DELAYS}}
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    futures = {name: pool.submit(scenario, world) for name, scenario in scenarios.items()}
    return {name: future.result() for name, future in futures.items()}


def _terminated(lines):
  found = [re.fullmatch(TERMINATED, line) for line in lines if line.startswith("terminated")]
  assert len(found) == 1 and found[0], lines[-30:]
  return found[0]


def _tensors(prefix):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith(("model/", "optimizer/", "rngs/"))}


# ------------------------------------------------------------------------------------------------
# SIGTERM saves the step in flight.


def test_sigterm_while_fine_tuning_saves_its_step_and_a_rerun_finishes(world):
  returncode, lines, _ = world["teacher_stopped"]
  assert returncode == 128 + signal.SIGTERM, lines[-30:]
  step = int(_terminated(lines).group("step"))
  assert 0 < step < 80  # saved at the notice: --save_checkpoints_steps would save none before 80
  resumed = world["teacher_resumed"]
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"Resuming from {world['teacher']}/model.ckpt-{step}" in resumed.stderr


def test_sigterm_in_the_middle_of_a_chunk_saves_that_step_and_the_rerun_is_exact(world, seen):
  """Two SIGTERMs (the second while the first one's save runs): the run stops after the step in
  flight of a 100,000-step chunk, saves it, ends with one line naming it and status 143; the rerun
  resumes from it and ends on the very weights, optimizer state and dropout state of the run
  never stopped."""
  found = seen["pretraining"]
  returncode, lines, seconds = found["stopped"]
  assert returncode == 128 + signal.SIGTERM, lines[-30:]
  assert "Traceback" not in "\n".join(lines)
  step = int(_terminated(lines).group("step"))
  assert 40 <= step < PRETRAINING_STEPS
  assert [name for name in found["saved"] if ".index" in name] == [f"model.ckpt-{step}.index"]
  assert not [name for name in found["saved"] if "_temp" in name or ".tmp-" in name]
  resumed, straight = found["resumed"], found["straight"]
  assert straight.returncode == 0, straight.stderr[-3000:]
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"Running training from step {step} to {PRETRAINING_STEPS}" in resumed.stderr
  ours = _tensors(str(world["root"] / "stopped" / f"model.ckpt-{PRETRAINING_STEPS}"))
  theirs = _tensors(str(world["root"] / "straight" / f"model.ckpt-{PRETRAINING_STEPS}"))
  assert sorted(ours) == sorted(theirs) and len(ours) > 20
  assert [name for name in ours if name.startswith("rngs/")]
  for name in theirs:
    np.testing.assert_array_equal(ours[name], theirs[name], err_msg=name)


def test_sigterm_while_distilling_saves_and_the_rerun_reads_the_soft_targets_back(seen):
  returncode, lines, _ = seen["distilled"]["stopped"]
  assert returncode == 128 + signal.SIGTERM, lines[-30:]
  checkpoint = _terminated(lines).group("checkpoint")
  resumed = seen["distilled"]["resumed"]
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert f"Resuming from {checkpoint}" in resumed.stderr
  assert "Teacher's logits read back from" in resumed.stderr


# ------------------------------------------------------------------------------------------------
# Multi-worker runs.


def test_a_terminated_worker_stops_both_at_one_step_saved(seen):
  (peer_status, peer_lines, _), (chief_status, chief_lines) = seen["multi_worker"]["terminated"]
  assert peer_status == chief_status == 128 + signal.SIGTERM, (peer_lines + chief_lines)[-40:]
  assert _terminated(peer_lines).group("step") == _terminated(chief_lines).group("step")
  assert not [line for line in peer_lines + chief_lines if "Traceback" in line]


def test_a_killed_worker_ends_the_run_in_bounded_time_naming_it(seen):
  status, lines, seconds, peer_status = seen["multi_worker"]["killed"]
  assert peer_status == -signal.SIGKILL
  assert status == 1, lines[-30:]
  errors = [line for line in lines if line.startswith("error: ")]
  assert len(errors) == 1, lines[-30:]
  assert re.match(r"error: --distribution_strategy=multi_worker_mirrored: worker 1 "
                  r"\(127\.0\.0\.1:\d+\) (went away|stopped sending heartbeats).*: training "
                  r"stopped; start every worker again with the same command", errors[0])
  assert seconds < BOUND + SLACK
  assert not [line for line in lines if "Traceback" in line]


def test_the_rerun_of_both_workers_resumes_and_finishes(seen):
  (chief_status, chief_lines), (peer_status, peer_lines) = seen["multi_worker"]["rerun"]
  assert chief_status == peer_status == 0, (chief_lines + peer_lines)[-40:]
  resumed = [line for line in chief_lines if "Resuming from" in line]
  assert resumed and not resumed[0].endswith("ckpt-0"), chief_lines[-30:]
  assert any(f"step {MULTI_WORKER_STEPS}/{MULTI_WORKER_STEPS}" in line for line in chief_lines)


def test_a_worker_that_never_starts_ends_the_run_within_the_bound(seen):
  status, lines, seconds = seen["multi_worker"]["alone"]
  assert status == 1, lines[-30:]
  errors = [line for line in lines if line.startswith("error: ")]
  assert errors == [errors[-1]] and re.match(
      rf"error: --distribution_strategy=multi_worker_mirrored: worker 1 \(127\.0\.0\.1:\d+\) did "
      rf"not connect within --worker_timeout_seconds={BOUND}: start it", errors[0]), lines[-30:]
  assert BOUND <= seconds < BOUND + SLACK


# ------------------------------------------------------------------------------------------------
# Ctrl-C at any moment of start-up; two exports in one second.


@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_at_any_moment_of_start_up_ends_the_run(seen, delay):
  returncode, stderr = seen[f"ctrl_c_{delay}"]
  assert returncode == 130, stderr[-3000:]
  assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr[-3000:]
  assert [line for line in stderr.splitlines() if line.startswith("interrupted: ")], stderr[-3000:]
  assert "***** Finished" not in stderr


def test_two_exports_in_one_second_take_two_versions(seen):
  found = seen["exports"]
  for done in found["done"]:
    assert done.returncode == 0, done.stderr[-3000:]
  versions = sorted(int(p.name) for p in found["export_dir"].iterdir() if p.name.isdigit())
  ahead = int(found["ahead"].name)
  assert versions == [ahead, ahead + 1, ahead + 2]
  assert (found["ahead"] / "saved_model.pb").read_bytes() == b"someone else's"
  assert not [p for p in found["export_dir"].iterdir() if p.name.startswith(".tmp-")]
  for version in versions[1:]:
    assert (found["export_dir"] / str(version) / "assets.extra" / "checksums.json").exists()


def test_a_version_taken_meanwhile_is_never_written_over(tmp_path):
  from bert_tf.io import fileio  # pylint: disable=g-import-not-at-top
  for name in ("a", "b", "c"):
    (tmp_path / name).mkdir()
    (tmp_path / name / "saved_model.pb").write_text(name)
  (tmp_path / "7").mkdir()
  (tmp_path / "7" / "mine").write_text("mine")
  assert fileio.rename_to_free_number(str(tmp_path / "a"), str(tmp_path), 6) == f"{tmp_path}/6"
  assert fileio.rename_to_free_number(str(tmp_path / "b"), str(tmp_path), 6) == f"{tmp_path}/8"
  assert fileio.rename_to_free_number(str(tmp_path / "c"), str(tmp_path), 6) == f"{tmp_path}/9"
  assert (tmp_path / "7" / "mine").read_text() == "mine"
  assert [(tmp_path / v / "saved_model.pb").read_text() for v in "689"] == ["a", "b", "c"]


# ------------------------------------------------------------------------------------------------
# A signal's exception where Python swallows it, and the notice a training loop gets.

_SWALLOWED = r"""
import os, signal, sys, time, weakref
sys.path.insert(0, {repo!r})
from bert_tf.cli import app
app.catch_startup_signals()
app._take_over_signals()
class Model: pass
model = Model()
def callback(_):  # as a model's loading runs thousands of them
  signal.raise_signal(signal.{name})
  for _ in range(10000): pass
unused = weakref.ref(model, callback)
try:
  del model
  time.sleep(3)
  print("went on")
except (KeyboardInterrupt, SystemExit) as e:
  print("stopped", type(e).__name__)
"""


def _as_a_terminal():
  """In the child: both signals' default actions, whatever this process inherited."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.mark.parametrize("name,stopped", [("SIGINT", "KeyboardInterrupt"),
                                          ("SIGTERM", "Terminated")])
def test_a_signal_swallowed_in_a_weakref_callback_is_raised_again(name, stopped):
  """Before, Python printed `Exception ignored in ...` and went on: the Ctrl-C was lost."""
  done = subprocess.run([sys.executable, "-c", _SWALLOWED.format(repo=REPO, name=name)],
                        capture_output=True, text=True, timeout=60, preexec_fn=_as_a_terminal)
  assert done.stdout == f"stopped {stopped}\n", done.stdout + done.stderr
  assert "Exception ignored" not in done.stderr, done.stderr


def test_a_notice_reaches_its_callback_from_a_thread_and_acts_after_the_block():
  import threading  # pylint: disable=g-import-not-at-top
  from bert_tf.training import interrupts  # pylint: disable=g-import-not-at-top
  called, acted = [], []
  previous = signal.signal(signal.SIGTERM, lambda signum, frame: acted.append(signum))
  try:
    with interrupts.noted(lambda signum: called.append(threading.current_thread().name)) as notice:
      os.kill(os.getpid(), signal.SIGTERM)
      deadline = time.monotonic() + 10
      while not called and time.monotonic() < deadline:
        time.sleep(0.01)
      assert not acted and notice.received == [signal.SIGTERM]
    assert called == ["bert_tf-signal-notice"] and acted == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is not None and signal.set_wakeup_fd(-1) == -1
  finally:
    signal.signal(signal.SIGTERM, previous)

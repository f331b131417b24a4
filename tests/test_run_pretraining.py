"""run_pretraining.py end to end, through the script runner's server: preemption (SIGKILL) and
resume, eval output, phase 2 from phase 1, the TF1 export, the ablations, and bad input."""
import concurrent.futures
import json
import os
import random
import signal

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training import scalars
from support import terminal
from support.pretraining_runs import CONFIG, command, read_eval_results
from support.pretraining_runs import write_pretraining_records
from support.script_runner import run_script
from support.started_scripts import start_script


def flags(tmp_path, output_dir, *extra, **shape):
  """run_pretraining.py's flags of support.pretraining_runs.command (its records written)."""
  return command(tmp_path, output_dir, *extra, **shape)[2:]


def run(args):
  """(exit status, stdout and stderr) of run_pretraining.py with args."""
  done = run_script("run_pretraining.py", *args, timeout=240)
  return done.returncode, done.stdout + done.stderr


def run_in_parallel(arg_lists):
  """run_script's CompletedProcess of run_pretraining.py with each of the arg lists, two at a
  time."""
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return list(pool.map(lambda args: run_script("run_pretraining.py", *args, timeout=240),
                         arg_lists))


def checkpoint_values(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith(("model/", "optimizer/"))}


def _killed_twice(tmp_path, output_dir, train, steps):
  """Two runs into output_dir, each SIGKILLed once its log reaches a step: the two steps."""
  # The first kill anywhere up to the middle, the second after checkpoints 4 and 8 are saved
  # (two kills before step 4 would leave nothing to resume from).
  kill_steps = [random.randrange(2, steps // 2), random.randrange(steps // 2 + 1, steps - 1)]
  for kill_step in kill_steps:
    started = start_script("run_pretraining.py", *flags(tmp_path, output_dir, *train))
    seen = []
    for line in started.stderr:
      seen.append(line)
      if f" step {kill_step}/{steps} " in line:
        os.kill(started.pid, signal.SIGKILL)
        break
    assert started.wait(timeout=120) == -signal.SIGKILL, "".join(seen)[-3000:]
  return kill_steps


def test_killed_twice_and_restarted_ends_with_the_same_weights(tmp_path):
  steps = 16
  train = ["--do_train", f"--num_train_steps={steps}", "--save_checkpoints_steps=4",
           "--iterations_per_loop=1"]
  straight_dir, killed_dir = str(tmp_path / "straight"), str(tmp_path / "killed")
  flags(tmp_path, straight_dir)  # writes the records once, before both runs start
  with concurrent.futures.ThreadPoolExecutor(1) as pool:  # the straight run beside the killed
    straight_run = pool.submit(run, flags(tmp_path, straight_dir, *train))
    kill_steps = _killed_twice(tmp_path, killed_dir, train, steps)
    code, log = straight_run.result()
  assert code == 0, log[-3000:]
  code, log = run(flags(tmp_path, killed_dir, *train))
  assert code == 0, log[-3000:]
  assert "Resuming from" in log, f"killed at steps {kill_steps}"
  # The curve covers the whole run, the steps the kills cut off and the resume redid included.
  assert [step for step, _ in scalars.read_scalars(os.path.join(killed_dir, "train"))["loss"]] == (
      list(range(1, steps + 1)))
  assert os.path.exists(os.path.join(killed_dir, "curves.png"))
  straight = checkpoint_values(os.path.join(straight_dir, f"model.ckpt-{steps}"))
  resumed = checkpoint_values(os.path.join(killed_dir, f"model.ckpt-{steps}"))
  assert set(straight) == set(resumed)
  for name, value in straight.items():
    np.testing.assert_array_equal(resumed[name], value,
                                  err_msg=f"{name} (killed at steps {kill_steps})")


@pytest.fixture(scope="module")
def phase1_run(tmp_path_factory):
  """Phase 1 at sequence length 8: train, eval and the TF1 export in one run: (output_dir, its
  output)."""
  tmp_path = tmp_path_factory.mktemp("phase1")
  output_dir = str(tmp_path / "out")
  code, log = run(flags(tmp_path, output_dir, "--do_train", "--do_eval", "--num_train_steps=4",
                        "--export_tf1_checkpoint", seq=8, preds=2))
  assert code == 0, log[-3000:]
  return output_dir, log


@pytest.fixture(scope="module")
def phase1(phase1_run):
  return phase1_run[0]


def test_the_run_ends_with_masked_lm_and_next_sentence_accuracy(phase1_run):
  output_dir, log = phase1_run
  assert terminal.chatter(log) == []
  figures = terminal.closing_figures(log)
  results = read_eval_results(output_dir)
  for name in ("masked_lm_accuracy", "next_sentence_accuracy"):
    assert float(figures[name]) == pytest.approx(float(results[name]), rel=1e-3)
    assert f"final training {name}" in figures  # the last step line's, beside the eval's


def test_eval_results_and_tf1_export(phase1):
  results = read_eval_results(phase1)
  assert sorted(results) == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                             "next_sentence_accuracy", "next_sentence_loss"]
  assert results["global_step"] == "4"
  assert float(results["loss"]) > 0
  assert tf.io.gfile.glob(os.path.join(phase1, "train", "events.*"))
  # The eval metrics beside the training curves, at the step they were measured; the picture.
  evaluation = scalars.read_scalars(os.path.join(phase1, "eval"))
  assert sorted(evaluation) == ["loss", "masked_lm_accuracy", "masked_lm_loss",
                                "next_sentence_accuracy", "next_sentence_loss"]
  assert evaluation["loss"] == [(4, pytest.approx(float(results["loss"])))]
  with open(os.path.join(phase1, "curves.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  # The exported TF1 checkpoint has the original's names.
  names = dict(tf.train.list_variables(os.path.join(phase1, "bert_model.ckpt")))
  assert names["bert/encoder/layer_1/attention/self/query/kernel"] == [32, 32]
  assert names["cls/predictions/output_bias"] == [50]


def test_phase2_at_a_longer_sequence_starts_from_phase1(tmp_path, phase1):
  # From our checkpoint and from the TF1 export, in parallel.
  inits = {"ours": phase1, "tf1": os.path.join(phase1, "bert_model.ckpt")}
  flags(tmp_path, str(tmp_path / "unused"))  # writes the records once, before both start
  runs = run_in_parallel([flags(tmp_path, str(tmp_path / name), "--do_eval",
                                f"--init_checkpoint={init}") for name, init in inits.items()])
  for name, done in zip(inits, runs):
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded" in done.stdout + done.stderr
    assert read_eval_results(str(tmp_path / name))["global_step"] == "0"


def test_ablations_no_nsp_and_left_to_right(tmp_path):
  ablations = ("--no_nsp", "--left_to_right")
  flags(tmp_path, str(tmp_path / "unused"))  # writes the records once, before both start
  runs = run_in_parallel([flags(tmp_path, str(tmp_path / flag[2:]), flag, "--do_train",
                                "--do_eval", "--num_train_steps=2") for flag in ablations])
  for flag, done in zip(ablations, runs):
    assert done.returncode == 0, done.stderr[-3000:]
    results = read_eval_results(str(tmp_path / flag[2:]))
    assert "next_sentence_accuracy" not in results
    # Without NSP the loss is the masked-LM loss (averaged per batch rather than per prediction).
    assert abs(float(results["masked_lm_loss"]) - float(results["loss"])) < 0.05


def test_bad_input_gives_one_line_errors(tmp_path, phase1):
  records_16 = write_pretraining_records(str(tmp_path / "r16.tfrecord"), 8)
  wrong_config = str(tmp_path / "wrong.json")
  with open(wrong_config, "w") as f:
    json.dump(dict(CONFIG, intermediate_size=40), f)
  cases = {
      "records": (flags(tmp_path, str(tmp_path / "a"), "--do_train", seq=12,
                        records=records_16), "has length 16 but the flags expect 12"),
      "glob": (flags(tmp_path, str(tmp_path / "b"), "--do_train",
                     records=str(tmp_path / "missing-*.tfrecord")), "matches no file"),
      "mode": (flags(tmp_path, str(tmp_path / "c")), "--do_train/--do_eval"),
      "init": (flags(tmp_path, str(tmp_path / "d"), "--do_eval", f"--init_checkpoint={phase1}",
                     seq=8, preds=2) + [f"--bert_config_file={wrong_config}"], "shape"),
  }
  runs = run_in_parallel([args for args, _ in cases.values()])
  for (name, (_, expected)), done in zip(cases.items(), runs):
    assert done.returncode == 1, f"{name}: {done.stderr[-3000:]}"
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and expected in last, f"{name}: {last}"

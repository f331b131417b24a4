"""Run-state faults: a run that goes on in an --output_dir must be the run that
directory holds. Resuming with other shape flags, exporting with another --task, two runs in one
directory, another task's or the pretraining run's directory, another vocabulary, records of
other lengths after the first, and a run that fails on its input: each ends with one `error:`
line naming the flag or file, exit status 1, and the directory as it was (or not there at all).

One tiny world is made once (a vocabulary, a config, MRPC-format data, pretraining records, a
pretraining run, a packed one and a fine-tuned classifier); the cases run as subprocesses, two
at a time, each on a copy of what it changes.
"""
import concurrent.futures
import json
import os
import re
import shutil
import signal
import time

import pytest

from support.script_runner import run_script
from support import faults
from support.faults import alive

WORDS, VOCAB, CONFIG = faults.RUN_WORDS, faults.RUN_VOCAB, faults.RUN_CONFIG


def pretraining_records(path, seq_lengths, seed=0):
  return faults.pretraining_records(path, seq_lengths, len(VOCAB), seed)


def files_of(path):
  """{relative path: (size, mtime)} of every file under path (None if it does not exist)."""
  if not os.path.exists(path):
    return None
  found = {}
  for directory, _, names in os.walk(path):
    for name in names:
      full = os.path.join(directory, name)
      found[os.path.relpath(full, path)] = (os.path.getsize(full), os.stat(full).st_mtime_ns)
  return found


def pretraining_flags(w, output_dir, input_file=None, *extra):
  return [f"--input_file={input_file or w['records']}", f"--output_dir={output_dir}",
          f"--bert_config_file={w['config']}", "--max_seq_length=32",
          "--max_predictions_per_seq=5", "--train_batch_size=4", "--num_train_steps=2",
          "--num_warmup_steps=1", f"--vocab_file={w['vocab']}", *extra]


def classifier_flags(w, output_dir, *extra, data_dir=None, task_name="MRPC"):
  return [f"--task_name={task_name}", f"--data_dir={data_dir or w['mrpc']}",
          f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
          "--max_seq_length=32", "--train_batch_size=4", "--num_train_epochs=1",
          f"--output_dir={output_dir}", *extra]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults_runs")
  w = faults.make_world(root, VOCAB, CONFIG, WORDS, mrpc_rows=8)
  w["records"] = pretraining_records(root / "pre.tfrecord", [32] * 24)
  w["pre"], w["packed"], w["cls"] = (str(root / name) for name in ("pre", "packed", "cls"))
  faults.run_all([("run_pretraining.py", pretraining_flags(w, w["pre"], None, "--do_train")),
                  ("run_pretraining.py", pretraining_flags(w, w["packed"], None, "--do_train",
                                                           "--pack_sequences")),
                  ("run_classifier.py", classifier_flags(w, w["cls"], "--do_train"))])
  return w


def copy_of(w, name, case_dir):
  shutil.copytree(w[name], case_dir)
  return str(case_dir)


def without_run_shape(output_dir):
  """A run directory as runs wrote them before train_run.json recorded run_shape."""
  path = os.path.join(output_dir, "train_run.json")
  recorded = json.loads(open(path).read())
  del recorded["run_shape"]
  with open(path, "w") as f:
    f.write(json.dumps(recorded))
  return output_dir


def with_best_of_another_model(w, case_dir):
  """A copy of the classifier run whose best/ holds the weights of a one-output (STS-B-like)
  classifier, as keep_best writes them."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import heads  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  output_dir = copy_of(w, "cls", case_dir)
  model = heads.BertClassifier(BertConfig.from_dict(CONFIG), num_labels=1)
  zeros = tf.zeros([1, 4], tf.int32)
  model({"input_ids": zeros, "input_mask": zeros + 1, "segment_ids": zeros}, training=False)
  checkpoints.save_tf2_checkpoint(model, f"{output_dir}/best/model.ckpt-2")
  (case_dir / "best" / "best.json").write_text(json.dumps({
      "metric": "eval_accuracy", "lower_is_better": False, "step": 2, "value": 0.5,
      "checkpoint": "model.ckpt-2", "evaluations": [[2, 0.5]]}))
  (case_dir / "best" / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-2"\n')
  return output_dir


# Each case: (script, flags: a function of the world and the case's own directory, the pattern of
# the one error line, what must be unchanged afterwards: a function of the world and the case
# directory giving a path (its files are compared before and after), or None).
CASES = {
    # --- 1. resuming with other shape flags ------------------------------------------------------
    "pretraining_packed_resumed_unpacked": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "packed", d), None, "--do_train", "--num_train_steps=4"),
        r"--pack_sequences: .* made with --pack_sequences: pass it to resume it", lambda w, d: d),
    "pretraining_packed_from_before_the_record_resumed_unpacked": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, without_run_shape(copy_of(w, "packed", d)), None, "--do_train",
            "--num_train_steps=4"),
        r"--output_dir: .*model\.ckpt-2 was written by a run whose input pipeline these flags do "
        r"not make \(one made with other flags, such as --pack_sequences", lambda w, d: d),
    "pretraining_unpacked_resumed_packed": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "pre", d), None, "--do_train", "--num_train_steps=4",
            "--pack_sequences"),
        r"--pack_sequences: .* made without --pack_sequences: leave it out", lambda w, d: d),
    "pretraining_resumed_left_to_right": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "pre", d), None, "--do_train", "--num_train_steps=4",
            "--left_to_right"),
        r"--left_to_right: .* made without --left_to_right: leave it out", lambda w, d: d),
    "classifier_resumed_packed": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d), "--do_train", "--num_train_epochs=2", "--pack_sequences"),
        r"--pack_sequences: .* made without --pack_sequences", lambda w, d: d),
    "classifier_resumed_longer_sequences": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d), "--do_train", "--num_train_epochs=2") + [
                "--max_seq_length=48"],
        r"--max_seq_length: .* made with --max_seq_length=32, not 48: pass --max_seq_length=32",
        lambda w, d: d),
    "classifier_resumed_with_another_config": (
        "run_classifier.py", lambda w, d: (d.mkdir(), (d / "c.json").write_text(json.dumps(
            dict(CONFIG, intermediate_size=24))), classifier_flags(
            w, copy_of(w, "cls", d / "out"), "--do_train", "--num_train_epochs=2") + [
                f"--bert_config_file={d / 'c.json'}"])[-1],
        r"--bert_config_file: .* holds checkpoints of a model with another config \(differs in "
        r"intermediate_size\)", lambda w, d: d),
    # --- 2. export with the wrong --task ---------------------------------------------------------
    "export_classifier_as_ner": (
        "export_savedmodel.py", lambda w, d: [
            "--task=ner", f"--label_file={w['root'] / 'labels.txt'}", f"--vocab_file={w['vocab']}",
            f"--bert_config_file={w['config']}", f"--init_checkpoint={w['cls']}",
            f"--export_dir={d}", "--max_seq_length=32"],
        r"--task: .*task_config\.json says .* a fine-tuned glue model \(MRPC\), not ner: "
        r"pass --task=glue", lambda w, d: d),
    "export_classifier_of_another_task_name": (
        "export_savedmodel.py", lambda w, d: [
            "--task=classifier", "--task_name=SST-2", f"--vocab_file={w['vocab']}",
            f"--bert_config_file={w['config']}", f"--init_checkpoint={w['cls']}/model.ckpt-2",
            f"--export_dir={d}", "--max_seq_length=32"],
        r"--task_name: .* fine-tuned on MRPC, not SST-2: pass --task_name=MRPC", lambda w, d: d),
    # --- 4. a run that fails on its input leaves no directory behind ----------------------------
    "classifier_train_file_missing": (
        "run_classifier.py", lambda w, d: (d.mkdir(), classifier_flags(
            w, d / "out" / "run", "--do_train", "--do_eval", data_dir=d))[-1],
        r"train\.tsv: file not found", lambda w, d: d),
    "classifier_malformed_train_tsv": (
        "run_classifier.py", lambda w, d: (
            shutil.copytree(w["mrpc"], d / "data"),
            (d / "data" / "train.tsv").write_text(
                (d / "data" / "train.tsv").read_text() + "1\t2\tonly a\n"),
            classifier_flags(w, d / "out", "--do_train", "--do_eval", data_dir=d / "data"))[-1],
        r"train\.tsv: line 10 has 3 tab-separated columns, expected 5", lambda w, d: d),
    "classifier_malformed_train_tsv_in_existing_dir": (
        "run_classifier.py", lambda w, d: (
            shutil.copytree(w["mrpc"], d / "data"), (d / "out").mkdir(),
            (d / "data" / "train.tsv").write_text("Quality\n1\t2\n"),
            classifier_flags(w, d / "out", "--do_train", data_dir=d / "data"))[-1],
        r"train\.tsv: line 2 has 2 tab-separated columns, expected 5", lambda w, d: d),
    "swag_train_file_missing": (
        "run_swag.py", lambda w, d: (d.mkdir(), [
            f"--data_dir={d}", f"--vocab_file={w['vocab']}", f"--bert_config_file={w['config']}",
            "--do_train", f"--output_dir={d}/out", "--max_seq_length=32"])[-1],
        r"train\.csv", lambda w, d: d),
    "classifier_too_few_examples_for_a_batch": (
        "run_classifier.py", lambda w, d: (d.mkdir(), classifier_flags(
            w, d / "out", "--do_train", "--train_batch_size=16"))[-1],
        r"--train_batch_size: 8 training examples make no full batch of 16", lambda w, d: d),
    "eval_only_into_a_new_output_dir": (
        "run_classifier.py", lambda w, d: (d.mkdir(), classifier_flags(w, d / "out", "--do_eval"))[
            -1], r"--output_dir: .* holds no checkpoint and no --init_checkpoint was given",
        lambda w, d: d),
    # --- 5. another task's (or the pretraining run's) output_dir --------------------------------
    "classifier_into_another_tasks_output_dir": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d), "--do_train", task_name="SST-2"),
        r"--output_dir: .* holds a MRPC fine-tuning run \(task_config\.json\), not SST-2 "
        r"fine-tuning: give another --output_dir", lambda w, d: d),
    "classifier_eval_in_another_tasks_output_dir": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d), "--do_eval", task_name="RTE"),
        r"--output_dir: .* holds a MRPC fine-tuning run", lambda w, d: d),
    "classifier_into_the_pretraining_output_dir": (
        "run_classifier.py", lambda w, d: classifier_flags(w, copy_of(w, "pre", d), "--do_train"),
        r"--output_dir: .* holds a pretraining run \(.*model\.ckpt-2\), not MRPC fine-tuning: "
        r"fine-tune into another --output_dir, with --init_checkpoint=", lambda w, d: d),
    "pretraining_into_a_finetuning_output_dir": (
        "run_pretraining.py", lambda w, d: pretraining_flags(w, copy_of(w, "cls", d), None,
                                                             "--do_train"),
        r"--output_dir: .* holds a MRPC fine-tuning run \(task_config\.json\), not a pretraining "
        r"one", lambda w, d: d),
    "best_weights_of_another_model": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, with_best_of_another_model(w, d), "--do_eval", "--keep_best_metric=eval_accuracy"),
        r"--output_dir: .*best/model\.ckpt-2: the best weights kept there are not of this model "
        r"\(.*\): move .*best aside", lambda w, d: d),
    # --- 6. records of another length after the first ------------------------------------------
    "records_longer_after_the_first_in_a_file": (
        "run_pretraining.py", lambda w, d: (d.mkdir(), pretraining_flags(
            w, d / "out", pretraining_records(d / "mixed.tfrecord", [32] + [48] * 30),
            "--do_train", "--num_train_steps=3"))[-1],
        r"mixed\.tfrecord: record 2: feature 'input_ids' has length 48 but the flags expect 32",
        None),
    "records_longer_in_a_second_file": (
        "run_pretraining.py", lambda w, d: (d.mkdir(), pretraining_flags(
            w, d / "out", ",".join([pretraining_records(d / "a.tfrecord", [32] * 4),
                                    pretraining_records(d / "b.tfrecord", [48] * 4)]),
            "--do_train"))[-1],
        r"b\.tfrecord: feature 'input_ids' has length 48 but the flags expect 32",
        lambda w, d: d),
    # --- 7. another vocabulary -------------------------------------------------------------------
    "classifier_rerun_with_another_vocab": (
        "run_classifier.py", lambda w, d: (
            d.mkdir(), (d / "v.txt").write_text("\n".join(VOCAB[:7] + WORDS[::-1]) + "\n"),
            classifier_flags(w, copy_of(w, "cls", d / "out"), "--do_train",
                             "--num_train_epochs=2")[:-1] + [
                f"--vocab_file={d / 'v.txt'}", f"--output_dir={d / 'out'}"])[-1],
        r"--vocab_file: .*v\.txt differs from .*out/vocab\.txt, the vocabulary of the checkpoints "
        r"in .*: pass --vocab_file=.*out/vocab\.txt to go on with them", lambda w, d: d),
    # --- 8. more run-state mistakes --------------------------------------------------------------
    "pretraining_output_dir_is_a_file": (
        "run_pretraining.py", lambda w, d: (
            d.mkdir(), (d / "f").write_text("mine"),
            pretraining_flags(w, d / "f", None, "--do_train"))[-1],
        r"--output_dir: .*/f is a file, not a directory", lambda w, d: d),
    "init_checkpoint_a_directory_without_checkpoint": (
        "run_classifier.py", lambda w, d: (d.mkdir(), (d / "empty").mkdir(), classifier_flags(
            w, d / "out", "--do_train", f"--init_checkpoint={d / 'empty'}"))[-1],
        r"--init_checkpoint: .*empty: not a TensorFlow checkpoint", lambda w, d: d),
}


@pytest.fixture(scope="module")
def outcomes(world):
  """Runs every case, two at a time: name -> (CompletedProcess, case directory, files of the
  watched path before, after)."""
  (world["root"] / "labels.txt").write_text("O\nB-X\n")

  def one(name):
    script, make_flags, _, watched = CASES[name]
    case_dir = world["root"] / "cases" / name
    args = [str(a) for a in make_flags(world, case_dir)]
    path = watched(world, case_dir) if watched else None
    before = files_of(path) if path else None
    done = run_script(script, *args, timeout=300)
    return name, (done, case_dir, before, files_of(path) if path else None)

  return faults.run_cases(world, CASES, one)


def _one_error_line(result, pattern):
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 1, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith("error: "), result.stderr[-3000:]
  assert re.search(pattern, last), last
  return last


@pytest.mark.parametrize("name", list(CASES))
def test_run_fault(outcomes, name):
  result, _, before, after = outcomes[name]
  _one_error_line(result, CASES[name][2])
  # Nothing TensorFlow logs after the line (abandoned restores, ...), nothing left half-written.
  assert "unrestored values" not in result.stderr
  if CASES[name][3] is not None:
    assert after == before
  assert not [name for name in (files_of(str(outcomes[name][1])) or {})
              if ".tmp-" in name or "_temp" in name]


def test_there_are_enough_cases():
  assert len(CASES) >= 20


def test_a_new_run_records_its_shape_and_resumes_with_the_same_flags(world, outcomes, tmp_path):
  """The packed run's train_run.json names its shape; resuming with the same flags trains on."""
  recorded = json.loads((world["root"] / "packed" / "train_run.json").read_text())["run_shape"]
  assert recorded["pack_sequences"] is True and recorded["left_to_right"] is False
  output_dir = copy_of(world, "packed", tmp_path / "packed")
  done = run_script("run_pretraining.py", *pretraining_flags(
      world, output_dir, None, "--do_train", "--num_train_steps=3", "--pack_sequences"))
  assert done.returncode == 0, done.stderr[-3000:]
  assert "Resuming from" in done.stderr and os.path.exists(f"{output_dir}/model.ckpt-3.index")


# --- 3. two runs in one output_dir ---------------------------------------------------------------

def test_a_second_run_into_a_held_output_dir_refuses_and_a_killed_holder_blocks_nothing(
    world, tmp_path):
  output_dir = tmp_path / "out"
  lock = output_dir / ".bert_tf.lock"
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    first = pool.submit(run_script, "run_pretraining.py", *pretraining_flags(
        world, output_dir, None, "--do_train", "--num_train_steps=100000",
        "--save_checkpoints_steps=100000"), timeout=300)
    deadline = time.time() + 120
    while time.time() < deadline and not (lock.exists() and lock.read_text().endswith("\n")):
      assert not first.done(), first.result().stderr[-3000:]
      time.sleep(0.05)
    holder = lock.read_text().strip()
    pid = int(re.fullmatch(r"pid (\d+) on .+", holder).group(1))
    try:
      third_run = pool.submit(run_script, "run_classifier.py",  # beside the second
                              *classifier_flags(world, output_dir, "--do_train"))
      second = run_script("run_pretraining.py", *pretraining_flags(world, output_dir, None,
                                                                   "--do_train"))
      third = third_run.result()
      last = _one_error_line(second, rf"--output_dir: .*out is in use by another run "
                                     rf"\({re.escape(holder)}, holding .*\.bert_tf\.lock\)")
      assert "wait for it to end, or give another --output_dir" in last
      _one_error_line(third, rf"--output_dir: .*out is in use by another run \({re.escape(holder)}")
      assert alive(pid) and not first.done()  # the refused runs left the holder alone
    finally:
      os.kill(pid, signal.SIGKILL)
    assert first.result().returncode == -signal.SIGKILL
  assert not alive(pid)
  assert lock.read_text().strip() == holder  # what a SIGKILL leaves behind ...
  # ... blocks nothing: the next run trains, and its lock file goes when it ends.
  done = run_script("run_pretraining.py", *pretraining_flags(world, output_dir, None,
                                                             "--do_train"))
  assert done.returncode == 0, done.stderr[-3000:]
  assert os.path.exists(output_dir / "model.ckpt-2.index") and not lock.exists()

"""Checkpoints a rerun must never write over, and resuming under other batching.

An output_dir's state is found by listing its whole model.ckpt-N (tf_checkpoint.latest_checkpoint),
not by the `checkpoint` file alone: a missing or stale state file resumes from the newest whole
checkpoint with one warning line, an incomplete checkpoint before it is named and left alone, and
a damaged one after it (a file missing, a .data file cut short, a tensor TensorFlow cannot read)
is named in one warning and renamed aside, never deleted, while the run goes on from the newest
whole one; a save never writes over existing files. A run resumed with
another --gradient_accumulation_steps continues exactly (the same weights as the uninterrupted
run); another --train_batch_size is refused in one line naming both values.

One tiny world is made once (a vocabulary, a config without dropout, MRPC-format data,
pretraining records, a pretraining run and a classifier run, each saving steps 2 and 4); each case
runs a script on a copy of what it changes, two at a time.
"""
import os
import re
import shutil

import numpy as np
import pytest

from support.script_runner import run_script
from support import faults

WORDS, VOCAB = faults.RUN_WORDS, faults.RUN_VOCAB
# No dropout: a run resumed with gradient accumulation computes the very sums of the full batch.
CONFIG = dict(faults.RUN_CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def pretraining_flags(w, output_dir, *extra, batch=4):
  return [f"--input_file={w['records']}", f"--output_dir={output_dir}",
          f"--bert_config_file={w['config']}", "--max_seq_length=32",
          "--max_predictions_per_seq=5", f"--train_batch_size={batch}", "--num_warmup_steps=1",
          f"--vocab_file={w['vocab']}", "--do_train", "--save_checkpoints_steps=2", *extra]


def classifier_flags(w, output_dir, *extra, batch=8):
  # 16 examples, batches of 8: 2 steps an epoch.
  return ["--task_name=MRPC", f"--data_dir={w['mrpc']}", f"--vocab_file={w['vocab']}",
          f"--bert_config_file={w['config']}", "--max_seq_length=32",
          f"--train_batch_size={batch}", f"--output_dir={output_dir}",
          "--save_checkpoints_steps=2", *extra]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults_resume")
  w = faults.make_world(root, VOCAB, CONFIG, WORDS, mrpc_rows=16)
  w["records"] = faults.pretraining_records(root / "pre.tfrecord", [32] * 24, len(VOCAB))
  w["pre"], w["cls"] = str(root / "pre"), str(root / "cls")
  faults.run_all([
      ("run_pretraining.py", pretraining_flags(w, w["pre"], "--num_train_steps=4")),
      ("run_classifier.py", classifier_flags(w, w["cls"], "--do_train", "--num_train_epochs=2"))])
  return w


def copy_of(w, name, case_dir, drop=(), state=None):
  """A copy of the run `name` in case_dir, without the files `drop` names (globs); state: the
  `checkpoint` file's new text (None: as it was)."""
  shutil.copytree(w[name], case_dir)
  for pattern in drop:
    for path in case_dir.glob(pattern):
      path.unlink()
  if state is not None:
    (case_dir / "checkpoint").write_text(state)
  return str(case_dir)


def _cut(path):
  """The file cut to two thirds, as a power loss leaves a file the page cache had not written."""
  data = path.read_bytes()
  path.write_bytes(data[:len(data) * 2 // 3])


def _flip(path):
  data = bytearray(path.read_bytes())
  data[len(data) // 2] ^= 0xFF
  path.write_bytes(bytes(data))


def files_of(path, pattern="model.ckpt-*"):
  """{name: (bytes, mtime)} of the files in path that `pattern` matches."""
  return {str(p.relative_to(path)): (p.read_bytes(), p.stat().st_mtime_ns)
          for p in sorted(path.glob(pattern)) if p.is_file()}


def warnings_of(stderr):
  return [line for line in stderr.splitlines()
          if re.match(r"W\d{4} |\d\d:\d\d:\d\d warning: ", line)]


# Each case: script, its flags (a function of the world and the case directory, which the function
# fills), and what the run must do: ("resumes", step it resumes from, step it ends at, the pattern
# of its one warning line) or ("refused", the pattern of its one error line).
CASES = {
    "pretraining_without_state_file": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "pre", d, drop=["checkpoint"]), "--num_train_steps=6"),
        ("resumes", 4, 6, r"`checkpoint` file is missing: using the newest whole checkpoint "
                          r"found there, .*/model\.ckpt-4$")),
    "classifier_with_a_stale_state_file": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d, state='model_checkpoint_path: "model.ckpt-9"\n'),
            "--do_train", "--num_train_epochs=3"),
        ("resumes", 4, 6, r"`checkpoint` file names model\.ckpt-9, which is not there: using the "
                          r"newest whole checkpoint found there, .*/model\.ckpt-4$")),
    # Resumed with --gradient_accumulation_steps too (batches of 4 in micro-batches of 1): the
    # one warning is the incomplete checkpoint's.
    "pretraining_with_an_older_incomplete_checkpoint_resumed_with_gradient_accumulation": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "pre", d, drop=["model.ckpt-2.data-*"]), "--num_train_steps=6",
            "--gradient_accumulation_steps=4"),
        ("resumes", 4, 6, r"model\.ckpt-2 is incomplete \(no \.data file\): left as it is, not "
                          r"used$")),
    # A damaged checkpoint newer than the newest whole one is set aside (renamed, never deleted)
    # with one warning, and the run goes on from the one before: (..., {file: its new name}).
    "pretraining_with_a_newer_incomplete_checkpoint": (
        "run_pretraining.py", lambda w, d: (
            copy_of(w, "pre", d), shutil.copy(d / "model.ckpt-4.index", d / "model.ckpt-6.index"),
            pretraining_flags(w, d, "--num_train_steps=6"))[-1],
        ("resumes", 4, 6, r"model\.ckpt-6 is damaged \(no \.data file\): skipped, going on from "
                          r".*/model\.ckpt-4, the newest whole checkpoint before it",
         {"model.ckpt-6.index": "model.ckpt-6.damaged-1.index"})),
    "pretraining_with_only_incomplete_checkpoints": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "pre", d, drop=["model.ckpt-*.data-*", "checkpoint"]),
            "--num_train_steps=2"),
        ("resumes", 0, 2, r"model\.ckpt-[24] is damaged \(no \.data file\): skipped, no whole "
                          r"checkpoint before it: a training run starts afresh",
         {"model.ckpt-2.index": "model.ckpt-2.damaged-1.index",
          "model.ckpt-4.index": "model.ckpt-4.damaged-1.index"})),
    "classifier_with_a_missing_data_shard": (
        "run_classifier.py", lambda w, d: (
            copy_of(w, "cls", d),
            shutil.move(d / "model.ckpt-4.data-00000-of-00001",
                        d / "model.ckpt-4.data-00000-of-00002"),
            classifier_flags(w, d, "--do_train", "--num_train_epochs=2"))[-1],
        ("resumes", 2, 4, r"model\.ckpt-4 is damaged \(1 of its 2 \.data shards missing "
                          r"\(\.data-00001-of-00002 \.\.\.\)\): skipped",
         {"model.ckpt-4.index": "model.ckpt-4.damaged-1.index",
          "model.ckpt-4.data-00000-of-00002": "model.ckpt-4.damaged-1.data-00000-of-00002"})),
    # The power loss: the newest .data file cut short, its index whole.
    "pretraining_with_its_newest_data_file_cut_short": (
        "run_pretraining.py", lambda w, d: (
            copy_of(w, "pre", d), _cut(d / "model.ckpt-4.data-00000-of-00001"),
            pretraining_flags(w, d, "--num_train_steps=4"))[-1],
        ("resumes", 2, 4, r"model\.ckpt-4 is damaged \(\.data-00000-of-00001 is cut short "
                          r"\([\d,]+ of [\d,]+ bytes\)\): skipped, going on from .*/model\.ckpt-2",
         {"model.ckpt-4.index": "model.ckpt-4.damaged-1.index",
          "model.ckpt-4.data-00000-of-00001": "model.ckpt-4.damaged-1.data-00000-of-00001"})),
    # Its index cut short (TensorFlow's table, which a native reader parses): named before.
    "pretraining_with_its_newest_index_cut_short": (
        "run_pretraining.py", lambda w, d: (
            copy_of(w, "pre", d), _cut(d / "model.ckpt-4.index"),
            pretraining_flags(w, d, "--num_train_steps=4"))[-1],
        ("resumes", 2, 4, r"model\.ckpt-4 is damaged \(its \.index cannot be read \(no table "
                          r"mark at its end: cut short or not a checkpoint index\)\): skipped",
         {"model.ckpt-4.index": "model.ckpt-4.damaged-1.index",
          "model.ckpt-4.data-00000-of-00001": "model.ckpt-4.damaged-1.data-00000-of-00001"})),
    # A flipped byte in a tensor: TensorFlow's checksum finds it as it restores.
    "classifier_with_a_flipped_byte_in_its_newest_data_file": (
        "run_classifier.py", lambda w, d: (
            copy_of(w, "cls", d), _flip(d / "model.ckpt-4.data-00000-of-00001"),
            classifier_flags(w, d, "--do_train", "--num_train_epochs=2"))[-1],
        ("resumes", 2, 4, r"model\.ckpt-4 cannot be read \(.*Checksum does not match.*\): its "
                          r"files are set aside as .*/model\.ckpt-4\.damaged-1\.\*: never written "
                          r"over, never deleted; going on from the newest checkpoint before it",
         {"model.ckpt-4.index": "model.ckpt-4.damaged-1.index",
          "model.ckpt-4.data-00000-of-00001": "model.ckpt-4.damaged-1.data-00000-of-00001"})),
    # --- resuming under other batching -------------------------------------------------------
    "classifier_resumed_with_gradient_accumulation": (  # weights compared below
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d, drop=["model.ckpt-4.*"],
                       state='model_checkpoint_path: "model.ckpt-2"\n'),
            "--do_train", "--num_train_epochs=2", "--gradient_accumulation_steps=2"),
        ("resumes", 2, 4, None)),
    "classifier_resumed_with_another_batch_size": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d), "--do_train", "--num_train_epochs=3", batch=4),
        ("refused", r"--train_batch_size: .* holds checkpoints of a run with "
                    r"--train_batch_size=8, not 4 .*: pass --train_batch_size=8 to resume it "
                    r"\(with --gradient_accumulation_steps if a batch does not fit in memory\)")),
    "pretraining_resumed_with_another_batch_size": (
        "run_pretraining.py", lambda w, d: pretraining_flags(
            w, copy_of(w, "pre", d), "--num_train_steps=6", batch=8),
        ("refused", r"--train_batch_size: .* --train_batch_size=4, not 8")),
    # --- evaluation without a state file -----------------------------------------------------
    "classifier_eval_without_state_file": (
        "run_classifier.py", lambda w, d: classifier_flags(
            w, copy_of(w, "cls", d, drop=["checkpoint"]), "--do_eval"),
        ("resumes", 4, 4, r"`checkpoint` file is missing")),
}


@pytest.fixture(scope="module")
def outcomes(world):
  """name -> (CompletedProcess, case directory, model.ckpt files before, after, every file
  before, after)."""

  def one(name):
    script, make_flags, _ = CASES[name]
    case_dir = world["root"] / "cases" / name
    args = [str(a) for a in make_flags(world, case_dir)]
    before, everything = files_of(case_dir), files_of(case_dir, "**/*")
    done = run_script(script, *args, timeout=400)
    return name, (done, case_dir, before, files_of(case_dir), everything,
                  files_of(case_dir, "**/*"))

  return faults.run_cases(world, CASES, one)


@pytest.mark.parametrize("name", list(CASES))
def test_no_checkpoint_is_written_over(outcomes, name):
  done, case_dir, before, after, everything, everything_after = outcomes[name]
  expected = CASES[name][2]
  set_aside = expected[4] if len(expected) > 4 else {}
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  # What was there stays, byte for byte, and untouched (renamed aside, when damaged).
  assert {n: after.get(set_aside.get(n, n)) for n in before} == before
  if expected[0] == "refused":
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and re.search(expected[1], last), last
    assert everything_after == everything  # nothing written at all
    return
  _, start, end, warning = expected[:4]
  assert done.returncode == 0, done.stderr[-3000:]
  if name.endswith("eval_without_state_file"):
    assert "global_step = 4" in (case_dir / "eval_results.txt").read_text()
  else:
    if start:
      assert f"Resuming from {case_dir}/model.ckpt-{start}" in done.stderr, done.stderr[-3000:]
    assert f"Running training from step {start} to {end}" in done.stderr
    written = [f"model.ckpt-{step}.{suffix}" for step in range(start + 2, end + 1, 2)
               for suffix in ("data-00000-of-00001", "index")]
    kept = set(before) - set(set_aside)  # what was there, and is where it was
    assert sorted(set(after) - kept - set(set_aside.values())) == sorted(written)
  checkpoint_warnings = [line for line in warnings_of(done.stderr)
                         if "checkpoint" in line and re.search("incomplete|damaged|cannot be read",
                                                               line) or "`checkpoint`" in line]
  if warning is None:
    assert not checkpoint_warnings, checkpoint_warnings
  else:  # one a checkpoint
    damaged = {new.split(".damaged-")[0] for new in set_aside.values()}
    assert len(checkpoint_warnings) == (len(damaged) or 1), done.stderr[-3000:]
    assert all(re.search(warning, line) for line in checkpoint_warnings), checkpoint_warnings


def test_a_resumed_run_with_gradient_accumulation_lands_on_the_uninterrupted_weights(world,
                                                                                    outcomes):
  """Steps 3 and 4 in 2 micro-batches of 4 (after steps 1 and 2 in batches of 8) give the
  weights of the run that made all four steps in batches of 8: the same examples, the same sums
  (float tolerance). Before, restoring the input position failed: its checkpointed iterator held
  micro-batches of the old size."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  done, case_dir = outcomes["classifier_resumed_with_gradient_accumulation"][:2]
  assert done.returncode == 0, done.stderr[-3000:]
  straight = tf.train.load_checkpoint(os.path.join(world["cls"], "model.ckpt-4"))
  resumed = tf.train.load_checkpoint(str(case_dir / "model.ckpt-4"))
  names = [name for name in straight.get_variable_to_shape_map()
           if name.startswith("model/") and name.endswith("VARIABLE_VALUE")]
  assert len(names) > 10
  for name in names:
    np.testing.assert_allclose(resumed.get_tensor(name), straight.get_tensor(name), rtol=1e-4,
                               atol=2e-6, err_msg=name)
  before = tf.train.load_checkpoint(os.path.join(world["cls"], "model.ckpt-2"))
  moved = sum(not np.array_equal(before.get_tensor(n), straight.get_tensor(n)) for n in names)
  assert moved > 10  # steps 3 and 4 changed the weights: the comparison can fail


def test_another_batch_size_is_refused_before_anything_else(outcomes):
  done = outcomes["classifier_resumed_with_another_batch_size"][0]
  assert [line for line in done.stderr.splitlines() if line.strip()] == [
      done.stderr.strip().splitlines()[-1]], done.stderr[-3000:]


def test_there_are_enough_cases():
  assert len(CASES) >= 10


# The state files a run reads as the one without any (pretraining_without_state_file, which runs
# the script on it end to end): only the warning differs.
STATE_FILES = {
    "garbage": ("\x00garbage {{",
                r"`checkpoint` file names no checkpoint \(it cannot be read\): using the newest "
                r"whole checkpoint found there, .*/model\.ckpt-4$"),
    "older": ('model_checkpoint_path: "model.ckpt-2"\n',
              r"`checkpoint` file names model\.ckpt-2, not the newest: using the newest whole "
              r"checkpoint found there, .*/model\.ckpt-4$"),
}


@pytest.mark.parametrize("kind", list(STATE_FILES))
def test_a_run_with_another_state_file_resumes_from_the_newest_whole_checkpoint(world, tmp_path,
                                                                                kind, caplog):
  import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.model.formats import tf_checkpoint  # pylint: disable=g-import-not-at-top
  state, warning = STATE_FILES[kind]
  run = copy_of(world, "pre", tmp_path / "pre", state=state)
  before = files_of(tmp_path / "pre", "*")
  with caplog.at_level(logging.WARNING):
    assert tf_checkpoint.latest_checkpoint(run) == f"{run}/model.ckpt-4"
  seen = [r.getMessage() for r in caplog.records]
  assert len(seen) == 1 and re.search(warning, seen[0]), seen
  assert files_of(tmp_path / "pre", "*") == before


# ------------------------------------------------------------------------------------------------
# The listing itself, and the last guard of a save.


def _checkpoint_files(directory, step, shards=1, index=True, skip=()):
  """model.ckpt-<step>'s files: its .index (a whole one of no tensor; b"" empty; None none) and
  its .data shards but those in skip."""
  for i in range(shards):
    if i not in skip:
      (directory / f"model.ckpt-{step}.data-{i:05d}-of-{shards:05d}").write_bytes(b"d")
  if index is not None:
    (directory / f"model.ckpt-{step}.index").write_bytes(
        faults.bundle_index(shards) if index is True else index)


def test_scan_finds_whole_and_incomplete_checkpoints_by_listing(tmp_path):
  from bert_tf.model.formats import tf_checkpoint  # pylint: disable=g-import-not-at-top
  _checkpoint_files(tmp_path, 2)
  _checkpoint_files(tmp_path, 4, shards=3)
  _checkpoint_files(tmp_path, 6, shards=3, skip=(1,))
  _checkpoint_files(tmp_path, 8, index=b"")
  _checkpoint_files(tmp_path, 9, index=faults.bundle_index()[:-1])
  _checkpoint_files(tmp_path, 10, index=None)
  (tmp_path / "model.ckpt-12_temp").mkdir()
  found = tf_checkpoint.scan_checkpoints(str(tmp_path))
  assert found.whole == [(2, f"{tmp_path}/model.ckpt-2"), (4, f"{tmp_path}/model.ckpt-4")]
  assert [(step, missing) for step, _, missing in found.incomplete] == [
      (6, "1 of its 3 .data shards missing (.data-00001-of-00003 ...)"),
      (8, "an empty .index file"),
      (9, "its .index cannot be read (no table mark at its end: cut short or not a checkpoint "
          "index)"), (10, "no .index file")]
  assert tf_checkpoint.latest_checkpoint(str(tmp_path)) == f"{tmp_path}/model.ckpt-4"
  assert tf_checkpoint.missing_checkpoint_files(f"{tmp_path}/model.ckpt-6") == found.incomplete[0][2]


def test_a_state_file_naming_the_newest_by_absolute_path_is_no_stale_one(tmp_path, monkeypatch,
                                                                        caplog):
  """An Estimator's state file names its checkpoints by absolute path; the directory given
  relatively (or through a link) is the same checkpoint: no warning."""
  import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.model.formats import tf_checkpoint  # pylint: disable=g-import-not-at-top
  run = tmp_path / "run"
  run.mkdir()
  _checkpoint_files(run, 2)
  _checkpoint_files(run, 4)
  (run / "checkpoint").write_text(f'model_checkpoint_path: "{run}/model.ckpt-4"\n')
  os.symlink(run, tmp_path / "link")
  monkeypatch.chdir(tmp_path)
  with caplog.at_level(logging.WARNING):
    assert tf_checkpoint.latest_checkpoint("link") == "link/model.ckpt-4"
  assert not caplog.records
  (run / "checkpoint").write_text(f'model_checkpoint_path: "{run}/model.ckpt-2"\n')
  with caplog.at_level(logging.WARNING):
    assert tf_checkpoint.latest_checkpoint("run") == "run/model.ckpt-4"
  assert [r.getMessage() for r in caplog.records] == [
      "run: its `checkpoint` file names model.ckpt-2, not the newest: using the newest whole "
      "checkpoint found there, run/model.ckpt-4"]


def test_a_save_at_a_step_whose_files_exist_writes_nothing(tmp_path):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop  # pylint: disable=g-import-not-at-top
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(v=tf.Variable(1.0)), str(tmp_path),
                                       max_to_keep=None, checkpoint_name="model.ckpt")
  (tmp_path / "model.ckpt-3.index").write_bytes(b"mine")
  with pytest.raises(BertTfError, match=r"model\.ckpt-3 exists \(model\.ckpt-3\.index, \.\.\.\): "
                                        r"a save at step 3 would write over it"):
    loop._save(tf.distribute.get_strategy(), manager, 3)  # pylint: disable=protected-access
  assert sorted(os.listdir(tmp_path)) == ["model.ckpt-3.index"]
  assert (tmp_path / "model.ckpt-3.index").read_bytes() == b"mine"
  loop._save(tf.distribute.get_strategy(), manager, 4)  # pylint: disable=protected-access
  assert (tmp_path / "model.ckpt-4.index").exists()


def test_init_checkpoint_of_a_run_directory_without_state_file_or_its_data_file(world, tmp_path):
  """--init_checkpoint=<output_dir> whose `checkpoint` file is gone, or naming a checkpoint's
  .data file: the checkpoint is found (before: "not a TensorFlow checkpoint (no .index file)")."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  run = copy_of(world, "pre", tmp_path / "pre", drop=["checkpoint"])
  assert checkpoints.detect_format(run) == ("tf2", f"{run}/model.ckpt-4")
  data = f"{run}/model.ckpt-2.data-00000-of-00001"
  assert checkpoints.detect_format(data) == ("tf2", f"{run}/model.ckpt-2")


def test_best_weights_of_a_step_evaluated_again_go_beside_the_kept_ones(tmp_path, monkeypatch):
  """A run resumed from an earlier checkpoint evaluates the best step again; a new best there is
  written under another name, then named best (best.json, the checkpoint file), and only then
  the old weights pruned: never written over."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.formats import tf_checkpoint  # pylint: disable=g-import-not-at-top
  from bert_tf.training import keep_best  # pylint: disable=g-import-not-at-top
  written, original = [], checkpoints.save_tf2_checkpoint

  def save(model, path):
    assert not tf.io.gfile.glob(path + ".*"), path
    written.append(path)
    return original(model, path)

  monkeypatch.setattr(keep_best.checkpoints, "save_tf2_checkpoint", save)
  weights = tf.train.Checkpoint(v=tf.Variable(1.0))
  keeper = keep_best.BestKeeper(str(tmp_path), "eval_accuracy")
  assert keeper.update(4, {"eval_accuracy": 0.5}, weights)
  keeper.rewind(2)  # resumed from step 2: step 4 is evaluated again, with other weights
  weights.v.assign(2.0)
  assert keeper.update(4, {"eval_accuracy": 0.7}, weights)
  best = tmp_path / "best"
  assert written == [f"{best}/model.ckpt-4", f"{best}/model.ckpt-4-1"]
  assert keeper.prefix == f"{best}/model.ckpt-4-1"
  assert sorted(os.listdir(best)) == ["best.json", "checkpoint",
                                      "model.ckpt-4-1.data-00000-of-00001", "model.ckpt-4-1.index"]
  assert tf_checkpoint.latest_checkpoint(str(best)) == keeper.prefix
  assert tf.train.load_checkpoint(keeper.prefix).get_tensor(
      "model/v/.ATTRIBUTES/VARIABLE_VALUE") == 2.0

"""Evaluation during training and the best model kept (bert_tf.training.keep_best): the flags' checks,
output_dir/best/ over a crafted metric sequence, the training loop's evaluations, early stopping
and resume, and run_classifier.py end to end on a dev set whose best step is known."""
import contextlib
import json
import math
import os
import types

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.drivers import pretraining
from bert_tf.model import checkpoints
from bert_tf.model import modeling
from bert_tf.serving import predictor
from bert_tf.tasks import conll
from bert_tf.tasks import glue
from bert_tf.tasks import squad_metrics
from bert_tf.training import keep_best
from bert_tf.training import loop
from bert_tf.training import runtime
from bert_tf.training import scalars
from bert_tf.training.options import RuntimeOptions
from bert_tf.training.options import Schedule
from bert_tf.training.options import TrainLoopOptions
from support.script_runner import run_script
from support.pretraining_runs import PREDS
from support.pretraining_runs import SEQ
from support.pretraining_runs import tiny_config
from support.pretraining_runs import write_pretraining_records
from support.tiny import common_args
from support.tiny import read_results
from support.tiny import write_config
from support.tiny import write_vocab

TASK = types.SimpleNamespace(primary_metric="eval_accuracy", eval_metric_names=lambda: [
    "eval_accuracy", "eval_loss", "eval_f1", "eval_entities", "global_step"])


def values(**overrides):
  flags = dict(do_train=True, eval_every_n_steps=None, keep_best_metric=None,
               early_stopping_patience=None)
  flags.update(overrides)
  return types.SimpleNamespace(**flags)


def test_metric_names_and_flag_checks():
  assert keep_best.resolve_metric("accuracy", TASK.eval_metric_names()) == "eval_accuracy"
  assert keep_best.resolve_metric("eval_f1", TASK.eval_metric_names()) == "eval_f1"
  assert keep_best.resolve_metric("exact_match", squad_metrics.V1_METRICS) == "exact_match"
  with pytest.raises(BertTfError, match=r"^--keep_best_metric: 'exact' is not a metric this "
                     r"task's evaluation reports; expected one of: eval_accuracy, eval_f1, "
                     r"eval_loss$"):  # counts and the step are not offered
    keep_best.resolve_metric("exact", TASK.eval_metric_names())
  assert keep_best.lower_is_better("eval_loss") and not keep_best.lower_is_better("eval_mcc")
  assert keep_best.plan(values(), TASK) is None
  assert keep_best.plan(values(eval_every_n_steps=5), TASK) == (5, None, None)
  # Early stopping alone watches (and keeps the best of) the task's primary metric.
  assert keep_best.plan(values(eval_every_n_steps=5, early_stopping_patience=2), TASK) == (
      5, "eval_accuracy", 2)
  assert keep_best.plan(values(eval_every_n_steps=5, keep_best_metric="loss"), TASK) == (
      5, "eval_loss", None)
  # Prediction from the best weights of an earlier run needs no evaluation.
  assert keep_best.plan(values(do_train=False, keep_best_metric="f1"), TASK) == (
      None, "eval_f1", None)
  for flags, message in [  # the combinations: FinetuneOptions checks them; the metric: plan
      (values(do_train=False, eval_every_n_steps=5), "--eval_every_n_steps: .*needs --do_train"),
      (values(early_stopping_patience=2), "--early_stopping_patience: needs --eval_every_n_steps"),
      (values(keep_best_metric="f1"), "--keep_best_metric: needs --eval_every_n_steps"),
      (values(eval_every_n_steps=5, keep_best_metric="mcc"), "--keep_best_metric: 'mcc' is not"),
  ]:
    with pytest.raises(BertTfError, match=message):
      keep_best.plan(finetune_options.FinetuneOptions(
          output_dir="out", bert_config_file="c", vocab_file="v", do_predict=True,
          **vars(flags)), TASK)


def test_tasks_name_their_metrics(tmp_path):
  options = types.SimpleNamespace(task=glue.GlueOptions(task_name="cola"), max_seq_length=32)
  cola = glue.GlueTask(options, None)
  assert cola.eval_metric_names() == ["eval_accuracy", "eval_loss", "eval_mcc"]
  assert cola.primary_metric in cola.eval_metric_names()
  stsb = glue.GlueTask(types.SimpleNamespace(task=glue.GlueOptions(task_name="sts-b"),
                                             max_seq_length=32), None)
  assert stsb.primary_metric == "eval_spearman" and "eval_pearson" in stsb.eval_metric_names()
  ner = conll.NerTask.__new__(conll.NerTask)
  ner.label_list = ["O", "B-LOC", "B-PER", "I-PER"]
  names = ner.eval_metric_names()
  assert {"eval_f1", "eval_loss", "eval_PER_f1", "eval_LOC_recall"} <= set(names)
  assert keep_best.resolve_metric("PER_f1", names) == "eval_PER_f1"


class Weights(tf.Module):

  def __init__(self):
    super().__init__()
    self.v = tf.Variable(0.0)


def test_keeper_keeps_the_best_of_a_crafted_sequence_and_reads_it_back(tmp_path):
  output_dir = str(tmp_path)
  files = tmp_path / "files"
  files.mkdir()
  model = Weights()
  keeper = keep_best.BestKeeper(output_dir, "eval_accuracy", patience=2)
  improved = []
  for step, accuracy in zip(range(10, 70, 10), [0.5, 0.7, 0.6, 0.8, 0.75, math.nan]):
    model.v.assign(step)
    (files / "eval_results.txt").write_text(f"step {step}\n")
    improved.append(keeper.update(step, {"eval_accuracy": accuracy, "eval_loss": 1.0}, model,
                                  str(files)))
    assert keeper.should_stop == (step == 60)
  assert improved == [True, True, False, True, False, False]  # NaN is never a best
  best = tmp_path / "best"
  state = json.loads((best / "best.json").read_text())
  assert (state["step"], state["value"], state["metric"]) == (40, 0.8, "eval_accuracy")
  assert state["results"] == {"eval_accuracy": 0.8, "eval_loss": 1.0}
  assert (best / "eval_results.txt").read_text() == "step 40\n"  # the best evaluation's files
  assert sorted(p.name for p in best.glob("model.ckpt-*")) == [
      "model.ckpt-40.data-00000-of-00001", "model.ckpt-40.index"]  # older bests are removed
  # --init_checkpoint=<output_dir>/best names the weights; they are step 40's.
  assert checkpoints.detect_format(str(best)) == ("tf2", str(best / "model.ckpt-40"))
  restored = Weights()
  keeper.restore(restored)
  assert float(restored.v) == 40.0 and restored.global_step == 40
  # Read back (a resumed run): the best and the count since, then forgetting what comes after
  # the checkpoint it resumes from.
  again = keep_best.BestKeeper(output_dir, "eval_accuracy", patience=2)
  assert (again.step, again.since_best, again.should_stop) == (40, 2, True)
  again.rewind(50)
  assert (again.since_best, again.should_stop, again.evaluated(60)) == (1, False, False)
  with pytest.raises(BertTfError, match="--keep_best_metric: .* keeps the best by eval_accuracy"):
    keep_best.BestKeeper(output_dir, "eval_loss")
  (tmp_path / "mine" / "best").mkdir(parents=True)
  (tmp_path / "mine" / "best" / "notes.txt").write_text("the user's")
  with pytest.raises(BertTfError, match=r"^--output_dir: .*best exists and holds no best.json"):
    keep_best.BestKeeper(str(tmp_path / "mine"), "eval_accuracy")
  assert (tmp_path / "mine" / "best" / "notes.txt").read_text() == "the user's"
  losses = keep_best.BestKeeper(str(tmp_path / "loss"), "eval_loss")
  assert [losses.update(s, {"eval_loss": v}, model) for s, v in [(1, 1.0), (2, 0.8), (3, 0.9)]] \
      == [True, True, False]


def test_a_kill_during_a_new_best_leaves_one_best_whole(tmp_path, monkeypatch):
  files = tmp_path / "files"
  files.mkdir()
  model = Weights()
  keeper = keep_best.BestKeeper(str(tmp_path), "eval_accuracy")
  for step, accuracy in [(10, 0.5), (20, 0.7)]:
    model.v.assign(step)
    (files / "eval_results.txt").write_text(f"step {step}\n")
    if step == 20:  # killed after best.json, before the result files are moved in
      monkeypatch.setattr(keep_best.BestKeeper, "_name_and_prune", lambda self: 1 / 0)
    with pytest.raises(ZeroDivisionError) if step == 20 else contextlib.nullcontext():
      keeper.update(step, {"eval_accuracy": accuracy}, model, str(files))
    if step == 20:
      best = tmp_path / "best"
      assert (best / "eval_results.txt").read_text() == "step 10\n"  # not yet step 20's
  monkeypatch.undo()
  again = keep_best.BestKeeper(str(tmp_path), "eval_accuracy")  # the resumed run finishes it
  assert again.step == 20 and (best / "eval_results.txt").read_text() == "step 20\n"
  assert sorted(p.name for p in best.glob("model.ckpt-*")) == [
      "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]
  restored = Weights()
  again.restore(restored)
  assert float(restored.v) == 20.0


class FakeTask:
  """Scores each evaluation with a crafted accuracy by step, after reading every batch."""

  def __init__(self, accuracies, kill_at=None):
    self.accuracies, self.kill_at, self.evaluated = accuracies, kill_at, []

  def finish_split(self, split, state, batches, global_step, output_dir=None):
    assert split == "dev" and sum(1 for _ in batches) == 2
    if global_step == self.kill_at:
      self.kill_at = None
      raise KeyboardInterrupt  # killed during the evaluation, after the step's checkpoint
    self.evaluated.append(global_step)
    with open(os.path.join(output_dir, "eval_results.txt"), "w") as f:
      f.write(f"global_step = {global_step}\n")
    return {"eval_accuracy": self.accuracies[global_step], "global_step": global_step}


def train_with(output_dir, record_file, task, num_train_steps=12):
  runtime.set_seed(7)
  strategy = runtime.get_strategy("one_device")
  eval_input_fn = records.records_input_fn(  # one pass (pretraining's eval input repeats)
      [record_file], records.pretraining_features(SEQ, PREDS), 8, False)
  evaluator = keep_best.Evaluator(keep_best.Plan(2, "eval_accuracy", 2), task, strategy, "dev",
                                  eval_input_fn, 2, None, str(output_dir))
  input_fn = pretraining.input_fn([record_file], SEQ, PREDS, 8, True, seed=3)
  config = tiny_config()
  try:
    return loop.train(strategy, lambda: modeling.BertPretrainer(config), pretraining.loss_fn(),
                      input_fn, Schedule(num_train_steps, 1e-3, 2), str(output_dir),
                      TrainLoopOptions(log_steps=4, save_checkpoints_steps=100),
                      RuntimeOptions(seed=7), evaluator=evaluator)
  finally:
    evaluator.close()


def test_training_evaluates_keeps_the_best_stops_early_and_resumes(tmp_path):
  record_file = write_pretraining_records(str(tmp_path / "dev.tfrecord"), 16)
  accuracies = {2: 0.5, 4: 0.7, 6: 0.6, 8: 0.65, 10: 0.9, 12: 0.9}
  output_dir = tmp_path / "out"
  # Killed during the evaluation of step 4 (its checkpoint saved): the resumed run evaluates 4
  # first, and goes on as one run would.
  killed = FakeTask(accuracies, kill_at=4)
  with pytest.raises(KeyboardInterrupt):
    train_with(output_dir, record_file, killed)
  assert killed.evaluated == [2]
  resumed = FakeTask(accuracies)
  model = train_with(output_dir, record_file, resumed)
  # Every 2 steps; the best at 4, then 2 evaluations without improvement: stopped at 8 of 12.
  assert resumed.evaluated == [4, 6, 8] and loop.global_step(model) == 8
  assert {f"model.ckpt-{s}.index" for s in (2, 4, 6, 8)} <= set(os.listdir(output_dir))
  assert "model.ckpt-10.index" not in os.listdir(output_dir)
  curve = scalars.read_scalars(str(output_dir / "eval"))["eval_accuracy"]
  assert [s for s, _ in curve] == [2, 4, 6, 8]
  assert [v for _, v in curve] == pytest.approx([0.5, 0.7, 0.6, 0.65])
  state = json.loads((output_dir / "best" / "best.json").read_text())
  assert state["step"] == 4 and [e[0] for e in state["evaluations"]] == [2, 4, 6, 8]
  assert (output_dir / "best" / "eval_results.txt").read_text() == "global_step = 4\n"
  # The best weights are step 4's checkpoint's.
  best = tf.train.load_checkpoint(str(output_dir / "best" / "model.ckpt-4"))
  at_4 = tf.train.load_checkpoint(str(output_dir / "model.ckpt-4"))
  keys = [k for k in best.get_variable_to_shape_map() if k.startswith("model/")
          and "OPTIMIZER" not in k and best.get_variable_to_dtype_map()[k] == tf.float32]
  assert len(keys) > 10
  for key in keys:
    np.testing.assert_array_equal(best.get_tensor(key), at_4.get_tensor(key), err_msg=key)
  at_8 = tf.train.load_checkpoint(str(output_dir / "model.ckpt-8"))
  assert any(not np.array_equal(best.get_tensor(k), at_8.get_tensor(k)) for k in keys)
  # Run again: it resumes at 8, where patience already ran out, and stops at once.
  again = FakeTask(accuracies)
  assert loop.global_step(train_with(output_dir, record_file, again)) == 8
  assert again.evaluated == []


def _flipped_sst2(data_dir):
  """A learnable task whose dev labels are the training rule's opposite: the more the model
  learns, the higher its dev loss, so the first evaluation is the best by eval_loss. test.tsv
  holds the dev sentences, so that test_results.tsv can be scored."""
  rng = np.random.RandomState(1)
  data_dir.mkdir()

  def rows(n):
    out = []
    for _ in range(n):
      label = int(rng.randint(2))
      words = list(rng.choice(["the", "movie", "film", "plot", "was", "is", "a", "very"],
                              rng.randint(3, 8)))
      words.insert(rng.randint(len(words) + 1),
                   rng.choice(["good", "fine"] if label else ["bad", "awful"]))
      out.append((" ".join(words), label))
    return out

  train, dev = rows(128), rows(32)
  (data_dir / "train.tsv").write_text("sentence\tlabel\n" + "".join(
      f"{t}\t{l}\n" for t, l in train))
  (data_dir / "dev.tsv").write_text("sentence\tlabel\n" + "".join(
      f"{t}\t{1 - l}\n" for t, l in dev))
  (data_dir / "test.tsv").write_text("index\tsentence\n" + "".join(
      f"{i}\t{t}\n" for i, (t, _) in enumerate(dev)))
  return np.array([1 - l for _, l in dev])


def test_run_classifier_keeps_the_best_and_predicts_with_it(tmp_path):
  vocab = write_vocab(tmp_path)
  config = write_config(tmp_path / "bert_config.json", 20)
  dev_labels = _flipped_sst2(tmp_path / "data")
  output_dir = tmp_path / "out"
  result = run_script(
      "run_classifier.py", *common_args(tmp_path / "data", vocab, config, output_dir),
      "--task_name=SST-2", "--do_train", "--do_eval", "--do_predict", "--train_batch_size=16",
      "--num_train_epochs=8", "--learning_rate=3e-3", "--eval_every_n_steps=8",
      "--keep_best_metric=loss", "--early_stopping_patience=2", "--predict_batch_size=32")
  assert result.returncode == 0, result.stderr[-3000:]
  state = json.loads((output_dir / "best" / "best.json").read_text())
  assert state["metric"] == "eval_loss" and state["step"] == 8
  assert [step for step, _ in state["evaluations"]] == [8, 16, 24]
  losses = [v for _, v in state["evaluations"]]
  assert losses == sorted(losses) and losses[-1] > losses[0]  # it learns the training rule
  assert "Early stopping at step 24" in result.stderr and "model.ckpt-32.index" not in set(
      os.listdir(output_dir))
  assert "eval at step 16" in result.stderr
  summary = result.stderr[result.stderr.index("***** Finished in"):]
  assert "best weights: " in summary and "used for --do_eval, --do_predict" in summary
  # --do_eval and --do_predict used step 8's weights: the same loss, at global_step 8.
  results = read_results(output_dir)
  assert results["global_step"] == 8
  assert results["eval_loss"] == pytest.approx(state["value"], abs=1e-6)
  probabilities = np.loadtxt(output_dir / "test_results.tsv")
  loss = -np.mean(np.log(probabilities[np.arange(len(dev_labels)), dev_labels]))
  assert loss == pytest.approx(state["value"], abs=1e-4)
  assert [s for s, _ in scalars.read_scalars(str(output_dir / "eval"))["eval_loss"]] == [
      8, 16, 24]
  # A later run without --do_train predicts from best/ (not the latest checkpoint, step 24's).
  (output_dir / "test_results.tsv").unlink()
  result = run_script(
      "run_classifier.py", *common_args(tmp_path / "data", vocab, config, output_dir),
      "--task_name=SST-2", "--do_predict", "--keep_best_metric=eval_loss",
      "--predict_batch_size=32", f"--export_dir={tmp_path / 'export'}")
  assert result.returncode == 0, result.stderr[-3000:]
  np.testing.assert_allclose(np.loadtxt(output_dir / "test_results.tsv"), probabilities,
                             atol=1e-5)
  # The export holds the best weights too.
  sentences = [line.split("\t")[1] for line in
               (tmp_path / "data" / "test.tsv").read_text().splitlines()[1:]]
  served = predictor.load(str(tmp_path / "export"))(sentences)
  np.testing.assert_allclose([[r["scores"]["0"], r["scores"]["1"]] for r in served],
                             probabilities, atol=1e-4)

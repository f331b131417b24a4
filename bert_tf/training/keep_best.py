"""Evaluation during fine-tuning and the best model kept: --eval_every_n_steps,
--keep_best_metric and --early_stopping_patience.

  plan = keep_best.plan(options, task)     # metric errors, before TensorFlow starts; None: unused
  evaluator = keep_best.Evaluator(plan, task, strategy, split, input_fn, total_batches, state,
                                  output_dir, unpack=None)  # bert_tf.training.loop.train calls it
  keeper = keep_best.BestKeeper(output_dir, metric)   # output_dir/best/, read back
  keeper.restore(model)                    # the best weights, for eval, predict and export

output_dir/best/ holds the weights of the best evaluation so far, model.ckpt-<step>
(tf.train.Checkpoint(model=...), as training's checkpoints but without the optimizer; a
`checkpoint` file names it, so --init_checkpoint=<output_dir>/best loads it), the result files
that evaluation wrote (eval_results.txt, predictions.json, ...) and best.json: the metric, the
best step, its results and every evaluation's value. A new best's weights and result files are
written first (the result files staged beside the weights), then best.json, atomically: it is what
makes a new best; the result files are moved in after it (or, after a kill, when best/ is next
read). A kill at any moment leaves the previous best whole, or the new one. The early stopping
count is read back from it on resume.

Evaluation steps are checkpoint steps (training saves before evaluating), so the evaluations
best.json records never run ahead of the checkpoint a run resumes from; a run killed between the
save and the end of an evaluation evaluates that step again when it resumes.
"""
import collections
import json
import math
import os
import shutil
import tempfile
import time

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io.fileio import write_text_atomically
from bert_tf.io import progress
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint
from bert_tf.training import loop
from bert_tf.training import saves
from bert_tf.training import scalars

BEST_DIR = "best"
_STAGED = ".result."  # <weights prefix>.result.<file>: a result file not yet moved in
STATE_FILE = "best.json"
WEIGHTS_NAME = "model.ckpt"
# Names an evaluation reports that are counts or settings, not scores to rank by.
_NOT_SCORES = ("total", "_thresh", "threshold", "_support", "_entities", "global_step")

Plan = collections.namedtuple("Plan", ["every_n_steps", "metric", "patience"])


def lower_is_better(metric):
  """Losses are minimised; every other score (accuracy, F1, MCC, exact match, ...) maximised."""
  return metric.endswith("loss")


def resolve_metric(name, reported, flag="--keep_best_metric"):
  """The reported metric `name` means: itself or eval_<name>; a BertTfError listing the valid
  names otherwise."""
  valid = sorted(n for n in reported if not n.endswith(_NOT_SCORES))
  for candidate in (name, f"eval_{name}"):
    if candidate in valid:
      return candidate
  raise BertTfError(f"{flag}: {name!r} is not a metric this task's evaluation reports; "
                    f"expected one of: {', '.join(valid)}")


def plan(options, task):
  """The Plan of a run's bert_tf.drivers.finetune_options.FinetuneOptions (None when none of the three
  flags is given; their combinations are checked there), its metric one the task reports: a
  BertTfError names the flag. --early_stopping_patience without --keep_best_metric watches (and
  keeps the best of) the task's primary_metric."""
  every, metric = options.eval_every_n_steps, options.keep_best_metric
  patience = options.early_stopping_patience
  if every is None and metric is None and patience is None:
    return None
  flag = "--keep_best_metric"
  if patience is not None and metric is None:
    metric, flag = task.primary_metric, "--early_stopping_patience"
    logging.info("--early_stopping_patience watches %s (no --keep_best_metric given)", metric)
  if metric is not None:
    metric = resolve_metric(metric, task.eval_metric_names(), flag)
  return Plan(every, metric, patience)


class BestKeeper:
  """output_dir/best/ (see the module docstring): the best evaluation by `metric` and the count of
  evaluations since, read back when it exists."""

  def __init__(self, output_dir, metric, patience=None):
    self.directory = os.path.join(output_dir, BEST_DIR)
    self.metric, self.patience = metric, patience
    self.state = {"metric": metric, "lower_is_better": lower_is_better(metric), "step": None,
                  "evaluations": []}
    path = os.path.join(self.directory, STATE_FILE)
    if not tf.io.gfile.exists(path) and tf.io.gfile.isdir(self.directory):
      foreign = [n for n in tf.io.gfile.listdir(self.directory) if not n.startswith(WEIGHTS_NAME)]
      if foreign:  # not ours (ours holds only weights before its first best.json): left alone
        raise BertTfError(f"--output_dir: {self.directory} exists and holds no {STATE_FILE} "
                          f"({foreign[0]}, ...): move it, or give a new --output_dir")
    if tf.io.gfile.exists(path):
      self.state = _read_state(path)
      if self.state.get("metric") != metric:
        raise BertTfError(f"--keep_best_metric: {self.directory} keeps the best by "
                          f"{self.state.get('metric')}, not {metric}: give that metric, or a new "
                          f"--output_dir")
      if self.prefix and (tf_checkpoint.state_file_checkpoint(self.directory) != self.prefix
                          or [prefix for _, prefix in tf_checkpoint.scan_checkpoints(
                              self.directory).whole] != [self.prefix]
                          or tf.io.gfile.glob(self.prefix + _STAGED + "*")):
        self._name_and_prune()  # a kill came between best.json and the end of _name_and_prune

  @property
  def step(self):
    """The best evaluation's step, or None when there is none."""
    return self.state["step"]

  @property
  def value(self):
    return self.state.get("value")

  @property
  def prefix(self):
    """The best weights' checkpoint prefix, or None."""
    if self.step is None:
      return None
    return os.path.join(self.directory, self.state["checkpoint"])

  def rewind(self, step):
    """Forgets the evaluations after `step`: a run resumed from an earlier checkpoint makes
    them again (the best weights stay)."""
    self.state["evaluations"] = [e for e in self.state["evaluations"] if e[0] <= step]

  def evaluated(self, step):
    return any(e[0] == step for e in self.state["evaluations"])

  def is_better(self, value):
    if value is None or not math.isfinite(value):
      return False
    if self.value is None:
      return True
    return value < self.value if lower_is_better(self.metric) else value > self.value

  @property
  def since_best(self):
    """Evaluations since the best one (all of them while there is none)."""
    best = self.step if self.step is not None else -1
    return sum(1 for e in self.state["evaluations"] if e[0] > best)

  @property
  def should_stop(self):
    return bool(self.patience) and self.since_best >= self.patience

  def update(self, step, results, model, files_dir=None, write=True):
    """Records the evaluation at `step`; when it is a new best, writes the model's weights and the
    files of files_dir into best/ (with `write`: the chief of a multi-worker run writes, every
    worker counts). Returns whether it was a new best."""
    value = results.get(self.metric)
    self.rewind(step - 1)
    self.state["evaluations"].append([int(step), value])
    improved = self.is_better(value)
    if not write:
      if improved:
        self.state.update(step=int(step), value=value, checkpoint=f"{WEIGHTS_NAME}-{step}")
      return improved
    if improved:
      tf.io.gfile.makedirs(self.directory)
      name = self._new_name(step)
      checkpoints.save_tf2_checkpoint(model, os.path.join(self.directory, name))
      for file_name in sorted(os.listdir(files_dir)) if files_dir else []:  # staged beside the
        tf.io.gfile.copy(os.path.join(files_dir, file_name),  # weights, moved in after best.json
                         os.path.join(self.directory, f"{name}{_STAGED}{file_name}"),
                         overwrite=True)
      self.state.update(step=int(step), value=value, checkpoint=name, results=_plain(results))
    self._write_state()
    if improved:
      self._name_and_prune()
    return improved

  def _new_name(self, step):
    """model.ckpt-<step>, or model.ckpt-<step>-<n> when weights of that name are there (the best
    of a step evaluated again after a resume from an earlier checkpoint): never written over."""
    name, n = f"{WEIGHTS_NAME}-{step}", 0
    while tf.io.gfile.glob(os.path.join(self.directory, name) + ".*"):
      n += 1
      name = f"{WEIGHTS_NAME}-{step}-{n}"
    return name

  def _name_and_prune(self):
    """Points best/checkpoint at the best weights and removes any others (an older best, or
    weights a kill left before their best.json)."""
    staged = self.prefix + _STAGED
    for path in tf.io.gfile.glob(staged + "*"):  # the best evaluation's result files
      tf.io.gfile.rename(path, os.path.join(self.directory, path[len(staged):]), overwrite=True)
    tf_checkpoint.write_state_file(self.directory, [self.state["checkpoint"]])
    for path in tf.io.gfile.glob(os.path.join(self.directory, f"{WEIGHTS_NAME}-*")):
      if not path.startswith(self.prefix + "."):
        tf.io.gfile.remove(path)

  def _write_state(self):
    tf.io.gfile.makedirs(self.directory)
    write_text_atomically(os.path.join(self.directory, STATE_FILE),
                          json.dumps(self.state, indent=2, sort_keys=True) + "\n")

  def restore(self, model):
    """Loads the best weights into a built model; sets its global_step to the best step. Weights
    of another model (a best/ another task or head left) are a BertTfError naming best/."""
    try:
      tf.train.Checkpoint(model=model).read(self.prefix).assert_existing_objects_matched()
    except (ValueError, AssertionError) + checkpoints.READ_ERRORS as e:
      message = (getattr(e, "message", None) or str(e)).strip().splitlines()
      error = message[0][:300] if message else type(e).__name__
    else:
      model.global_step = self.step
      return
    saves.silence_abandoned_restore()
    raise BertTfError(f"--output_dir: {self.prefix}: the best weights kept there are not of this "
                      f"model ({error}): move {self.directory} aside, or give a new --output_dir")

  def describe(self):
    return f"{self.prefix} (step {self.step}, {self.metric} {progress.format_figure(self.value)})"


def _plain(results):
  return {k: v for k, v in results.items() if isinstance(v, (int, float, str)) or v is None}


class Evaluator:
  """What bert_tf.training.loop.train calls every plan.every_n_steps steps (and at the last step):
  predicts the evaluation split's records, scores them with the task's finish_split (its files go
  to best/ with a new best, nowhere else), writes the metrics to TensorBoard, logs one line and
  keeps the best. Calling it returns whether training should stop (early stopping).
  unpack(batches) -> batches, optional: what the task scores, from the predict batches (packed
  rows: bert_tf.data.packing_finetune.Layout.unpack)."""

  def __init__(self, plan_, task, strategy, split, input_fn, total_batches, state, output_dir,
               unpack=None):
    self.every_n_steps = plan_.every_n_steps
    self.task, self.strategy, self.split, self.state = task, strategy, split, state
    self.input_fn, self.batches, self.output_dir = input_fn, total_batches, output_dir
    self.unpack = unpack
    self.chief = strategy.extended.should_checkpoint
    self.keeper = (BestKeeper(output_dir, plan_.metric, plan_.patience)
                   if plan_.metric else None)
    self.writer = None
    self.predict_steps = {}  # loop.predict's traced step, kept from one evaluation to the next

  def close(self):
    if self.writer is not None:
      self.writer.close()

  def due(self, step, num_train_steps):
    return step % self.every_n_steps == 0 or step == num_train_steps

  def resume(self, model, step, num_train_steps):
    """At the start of training (from `step`): evaluates `step` when a kill interrupted its
    evaluation; returns whether training should stop (early stopping happened before)."""
    if self.keeper is None:
      return False
    self.keeper.rewind(step)
    if step > 0 and self.due(step, num_train_steps) and not self.keeper.evaluated(step):
      return self(model, step)
    if self.keeper.should_stop:
      logging.info("Early stopping: %d evaluations without a new best %s (the best: %s)",
                   self.keeper.since_best, self.keeper.metric, self.keeper.describe())
    return self.keeper.should_stop

  def __call__(self, model, step):
    start = time.time()
    files_dir = tempfile.mkdtemp(prefix="bert_tf_eval_")
    try:
      with _quiet():
        batches = loop.predict(self.strategy, model, self.input_fn, total=self.batches,
                               step_cache=self.predict_steps)
        if self.unpack is not None:
          batches = self.unpack(batches)
        results = self.task.finish_split(self.split, self.state, batches, step,
                                         output_dir=files_dir)
      results = {k: v for k, v in (results or {}).items() if k != "global_step"}
      if self.chief:
        if self.writer is None:
          self.writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "eval"))
        scalars.write_eval_scalars(self.output_dir, results, step, writer=self.writer)
      improved = self.keeper and self.keeper.update(step, results, model, files_dir,
                                                    write=self.chief)
    finally:
      shutil.rmtree(files_dir, ignore_errors=True)
    self._log(step, results, improved, time.time() - start)
    return bool(self.keeper and self.keeper.should_stop)

  def _log(self, step, results, improved, seconds):
    figures = progress.headline(results, limit=4)
    keeper = self.keeper
    if keeper:
      figures[keeper.metric] = results.get(keeper.metric)
    line = ", ".join(f"{k} {progress.format_figure(v)}" for k, v in figures.items())
    if keeper and improved:
      line += f"; new best {keeper.metric}, kept in {keeper.directory}"
    elif keeper and keeper.step is not None:
      line += (f"; best {keeper.metric} {progress.format_figure(keeper.value)} at step "
               f"{keeper.step}, {keeper.since_best} evaluation(s) without improvement"
               + (f" (patience {keeper.patience})" if keeper.patience else ""))
    logging.info("eval at step %d (%s): %s", step, progress.format_duration(seconds), line)
    if keeper and keeper.should_stop:
      logging.info("Early stopping at step %d: %d evaluations without a new best %s (the best: "
                   "%s)", step, keeper.since_best, keeper.metric, keeper.describe())


class _quiet:  # pylint: disable=invalid-name
  """Keeps the task's scoring to warnings: an evaluation during training logs one line."""

  def __enter__(self):
    self.verbosity = logging.get_verbosity()
    logging.set_verbosity(logging.WARNING)

  def __exit__(self, *exc):
    logging.set_verbosity(self.verbosity)


def _read_state(path):
  """best.json (a BertTfError naming it when it is damaged: not a JSON object of best.json's
  fields)."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  try:
    state = json.loads(data.decode("utf-8"))
  except ValueError:
    state = None
  if not isinstance(state, dict) or not isinstance(state.get("evaluations", []), list):
    raise BertTfError(f"--output_dir: {path} is damaged (not the JSON object keep-best writes): "
                      f"move {os.path.dirname(path)} aside to train on without the best weights "
                      f"kept so far")
  return state

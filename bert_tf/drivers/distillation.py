"""Knowledge distillation in the fine-tuning scripts: a student learns from a fine-tuned teacher's
soft targets (Hinton et al., "Distilling the Knowledge in a Neural Network"), what the original
recommends for its small models and never shipped.

  run_classifier.py ... --do_train --teacher_dir=<teacher's output_dir> \
      --distill_temperature=2 --distill_alpha=0.5 [--transfer_file=unlabelled.tsv]

The teacher is a run_classifier.py / run_ner.py output_dir of the same task (its labels) and the
same vocabulary: its best weights (best/, --keep_best_metric) or else its latest checkpoint. Once
per run it predicts over the student's training records and over the --transfer_file's (raw text
in the task's input format without labels: GlueTask.write_transfer_records,
NerTask.write_transfer_records), and its logits are written beside the features, into the
student's train.tf_record, as float features teacher_logit_<j> (one per label: per example for a
classifier, per token for a tagger; scalars and per-token features pack like any other with
--pack_sequences), with soft_weights (the elements the soft term counts: every example, every
labelled word) and hard_weights (the same, 0 for the transfer set, which has no label). Training
then costs no teacher time. The logits are cached in output_dir (TEACHER_LOGITS, keyed by the
teacher's weights and the records in DISTILLATION_FILE): a resumed run reads them back, and the
same output_dir with another teacher, temperature or alpha is refused in one line.

The loss of every element (example or word), averaged as the task averages its own
(packing_finetune.mean_loss over soft_weights):
  alpha * T^2 * CE(softmax(teacher / T), softmax(student / T)) + (1 - alpha) * hard_weight * CE(label, student)
Evaluation, keep-best, prediction and export are the task's own: the student is a model like any
other (its task_config.json, its export).
"""
import hashlib
import io
import json
import os

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.model.model_options import ModelOptions
from bert_tf.training import keep_best
from bert_tf.training import loop

DISTILLATION_FILE = "distillation.json"  # which teacher, which records, T and alpha
TEACHER_LOGITS = "teacher_logits.npz"  # the teacher's logits of the records, cached
TRANSFER_RECORDS = "transfer.tf_record"
SOFT_WEIGHTS, HARD_WEIGHTS = "soft_weights", "hard_weights"


def teacher_feature(j):
  return f"teacher_logit_{j}"


# ---------------------------------------------------------------------------- the loss


def teacher_logits(features, num_labels):
  """The teacher's logits [..., num_labels] stacked from the teacher_logit_<j> features."""
  return tf.stack([tf.cast(features[teacher_feature(j)], tf.float32)
                   for j in range(num_labels)], axis=-1)


def element_losses(features, logits, num_labels, temperature, alpha):
  """Per element (example or token): alpha * T^2 * the soft cross-entropy at temperature T +
  (1 - alpha) * hard_weights * the hard label's cross-entropy."""
  logits = tf.cast(logits, tf.float32)
  t = float(temperature)
  targets = tf.nn.softmax(teacher_logits(features, num_labels) / t)
  soft = -tf.reduce_sum(targets * tf.nn.log_softmax(logits / t), axis=-1) * (t * t)
  hard = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label_ids"],
                                                        logits=logits)
  return alpha * soft + (1.0 - alpha) * tf.cast(features[HARD_WEIGHTS], tf.float32) * hard


def distillation_loss(features, outputs, num_labels, temperature, alpha):
  """The mean of element_losses over the soft_weights elements, as the task's own loss averages
  (packing_finetune.mean_loss: per micro-batch, or over the packed step)."""
  losses = element_losses(features, outputs["logits"], num_labels, temperature, alpha)
  return packing_finetune.mean_loss(features, losses, features[SOFT_WEIGHTS])


# ---------------------------------------------------------------------------- the teacher


def _real_path(path):
  return path if fileio.is_url(path) else os.path.realpath(path)


def _read_json(path, flag="--teacher_dir"):
  """A JSON object file of a run (a BertTfError naming it when it does not parse as one)."""
  try:
    value = json.loads(fileio.read_text(path))
  except ValueError as e:
    raise BertTfError(f"{flag}: {path}: not valid JSON ({e}): a damaged file of a fine-tuning "
                      f"run (train it again, or restore the file)") from None
  if not isinstance(value, dict):
    raise BertTfError(f"{flag}: {path}: a JSON {type(value).__name__}, not the object a "
                      f"fine-tuning run writes")
  return value


def _same(value):
  """A task_config.json value as compared: task names in any case."""
  return value.lower() if isinstance(value, str) else value


def _digest(paths):
  """sha256 of the files' bytes, in order."""
  digest = hashlib.sha256()
  for path in paths:
    with tf.io.gfile.GFile(path, "rb") as f:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
  return digest.hexdigest()


class Teacher:
  """A fine-tuned run's output_dir as a teacher of `task` (checked in Python: a one-line
  BertTfError naming --teacher_dir when it is not one)."""

  def __init__(self, teacher_dir, task, options):
    self.directory = teacher_dir
    flag = "--teacher_dir"
    config_path = os.path.join(teacher_dir, tf_checkpoint.TASK_CONFIG_FILE)
    if not tf.io.gfile.isdir(teacher_dir) or not tf.io.gfile.exists(config_path):
      raise BertTfError(f"{flag}: {teacher_dir} is not the output_dir of a fine-tuning run (no "
                        f"{tf_checkpoint.TASK_CONFIG_FILE})")
    config = _read_json(config_path)
    if config.get("task") != task.name:
      raise BertTfError(f"{flag}: {teacher_dir} holds a {config.get('task')} model, not a "
                        f"{task.name} one ({task.script})")
    unservable = task.unservable(config)
    if unservable or task.task_config_fields().get("regression"):
      raise BertTfError(f"{flag}: cannot distil from a {unservable or 'regression'} model")
    # The same labels (and GLUE task): the teacher's logits are the student's targets. A tagger
    # takes its teacher's tag set (its training tags within it: else named by file and line).
    if hasattr(task, "adopt_labels") and isinstance(config.get("label_list"), list):
      task.adopt_labels([str(label) for label in config["label_list"]], f"the teacher's "
                        f"({teacher_dir})")
    for key, mine in task.task_config_fields().items():
      if key in task.run_keys + ("task_name", "label_list") and _same(mine) != _same(config.get(key)):
        raise BertTfError(f"{flag}: {teacher_dir} was fine-tuned with {key} "
                          f"{config.get(key)}, not {mine}")
    if bool(config.get("do_lower_case")) != bool(options.do_lower_case):
      raise BertTfError(f"{flag}: {teacher_dir} was fine-tuned with do_lower_case="
                        f"{config.get('do_lower_case')}: pass the same --do_lower_case")
    self.prefix = self._weights()
    files = model_files.open_model(ModelOptions(init_checkpoint=teacher_dir),
                                   max_seq_length=options.max_seq_length, need_vocab=False,
                                   checkpoint_flag=flag)
    # Its tokens and their ids, not its bytes: the same file with CRLF line ends is the same.
    vocab = files.vocab_file or os.path.join(teacher_dir, tf_checkpoint.VOCAB_FILE)
    if not files.vocab_file or not model_files.same_vocabulary(vocab, options.vocab_file):
      raise BertTfError(f"{flag}: {vocab} is not --vocab_file {options.vocab_file}: a teacher "
                        f"and its student read the same token ids")
    self.config = files.config

  def _weights(self):
    """Its best weights (best/best.json) or else its latest checkpoint."""
    best = os.path.join(self.directory, keep_best.BEST_DIR, keep_best.STATE_FILE)
    if tf.io.gfile.exists(best):
      state = _read_json(best)
      if state.get("step") is not None:
        return os.path.join(self.directory, keep_best.BEST_DIR, state["checkpoint"])
    latest = tf_checkpoint.latest_checkpoint(self.directory)
    if not latest:
      raise BertTfError(f"--teacher_dir: {self.directory} holds no checkpoint (train the "
                        f"teacher first)")
    return latest

  def identity(self):
    """What names these weights: the directory (its real path: through a link it is the same),
    the checkpoint and its index's digest."""
    return {"teacher_dir": _real_path(self.directory),
            "checkpoint": os.path.relpath(self.prefix, self.directory),
            "index_sha256": _digest([self.prefix + ".index"])}

  def predict(self, task, paths, batch_size, trim_padding):
    """The teacher's logits (float32 [N, ...]) of the records in `paths`, in order."""
    bilstm, causal = checkpoints.bilstm_units(self.prefix), checkpoints.left_to_right(self.prefix)
    num_labels = task.num_labels(task.task_config_fields())
    model_fn = lambda: task.build_head(self.config, num_labels, trim_padding=trim_padding,
                                       bilstm_units=bilstm or None, causal=causal)
    input_fn = records.records_input_fn(paths, task.schema(False), batch_size,
                                        is_training=False)
    strategy = tf.distribute.get_strategy()
    logging.info("Teacher %s predicts over %s", self.prefix, ", ".join(paths))
    model, _ = loop.restore_model(strategy, model_fn, input_fn, init_checkpoint=self.prefix)
    return np.concatenate([batch["logits"].astype(np.float32)
                           for batch in loop.predict(strategy, model, input_fn)])


# ---------------------------------------------------------------------------- the task, distilled


def _record(output_dir):
  path = os.path.join(output_dir, DISTILLATION_FILE)
  return _read_json(path, "--output_dir") if tf.io.gfile.exists(path) else None


def wrap(task, options):
  """The task as finetuning.run trains it: DistilledTask with --teacher_dir and --do_train, else
  the task itself. A run already in output_dir distilled from another teacher, at another T or
  alpha, or (without --teacher_dir) distilled at all, is refused in one line."""
  distill, output_dir = options.distill, options.output_dir
  record = _record(output_dir)
  resuming = bool(tf_checkpoint.latest_checkpoint(output_dir)) and options.do_train
  if distill is None or not distill.teacher_dir or not options.do_train:
    if record and resuming:
      raise BertTfError(f"--teacher_dir: {output_dir} holds a run distilled from "
                        f"{record['teacher']['teacher_dir']}: pass that --teacher_dir to go on "
                        f"with it (or give a new --output_dir)")
    return task
  _check_not_in_teacher(output_dir, distill.teacher_dir)
  teacher = Teacher(distill.teacher_dir, task, options)
  if record:
    before = record["teacher"]
    if _as_compared(before) != _as_compared(teacher.identity()):
      raise BertTfError(f"--teacher_dir: {output_dir} holds soft targets of the teacher "
                        f"{os.path.join(before['teacher_dir'], before['checkpoint'])}, not "
                        f"{teacher.prefix}: give a new --output_dir")
    if resuming and _as_compared(record["settings"]) != distill.settings():
      changed = next(k for k in distill.settings() if record["settings"].get(k) !=
                     distill.settings()[k])
      flag = {"temperature": "--distill_temperature", "alpha": "--distill_alpha"}.get(
          changed, "--transfer_file")
      raise BertTfError(f"{flag}: {output_dir} holds a run distilled with {changed} "
                        f"{record['settings'][changed]}: pass the same, or give a new "
                        f"--output_dir")
  return DistilledTask(task, options, teacher)


def _as_compared(recorded):
  """A DISTILLATION_FILE record's paths as they are compared (runs before them kept absolute
  paths: their real paths now)."""
  return {key: _real_path(value) if key in ("teacher_dir", "transfer_file") and value else value
          for key, value in recorded.items()}


def _check_not_in_teacher(output_dir, teacher_dir):
  """A student's --output_dir is neither its --teacher_dir nor inside it: the run would write
  into the teacher's run (records, checkpoints, its task_config.json). Before anything is
  written."""
  student, teacher = _real_path(output_dir), _real_path(teacher_dir)
  if student == teacher or student.startswith(teacher.rstrip("/") + "/"):
    where = "is" if student == teacher else "is inside"
    raise BertTfError(f"--output_dir: {output_dir} {where} --teacher_dir {teacher_dir}: the "
                      f"student would write into its teacher's run; give the student an "
                      f"--output_dir of its own")


class DistilledTask:
  """A task whose training records carry its teacher's soft targets and whose loss is
  distillation_loss; everything else (evaluation, prediction files, export) is the task's."""

  packed_loss_weights = SOFT_WEIGHTS

  def __init__(self, task, options, teacher):
    self.task, self.options, self.teacher = task, options, teacher
    self.distill = options.distill
    self.num_labels = task.num_labels(task.task_config_fields())
    schema = task.schema(True)
    self.weights_name = task.packed_loss_weights if task.packed_loss_weights in schema else None
    self.element_shape = list(schema[self.weights_name].shape) if self.weights_name else []

  def __getattr__(self, name):
    return getattr(self.task, name)

  def schema(self, is_training):
    schema = self.task.schema(is_training)
    if not is_training:
      return schema
    element = tf.io.FixedLenFeature(self.element_shape, tf.float32)
    schema = dict(schema)
    for name in [teacher_feature(j) for j in range(self.num_labels)] + [SOFT_WEIGHTS,
                                                                        HARD_WEIGHTS]:
      schema[name] = element
    return schema

  def loss_fn(self, features, outputs):
    return distillation_loss(features, outputs, self.num_labels, self.distill.distill_temperature,
                             self.distill.distill_alpha)

  def train_metric_fn(self, features, outputs):
    """The task's training metrics over the labelled elements only (the transfer set's labels
    are placeholders)."""
    if self.task.train_metric_fn is None:
      return {}
    weights = features[HARD_WEIGHTS]
    name = self.task.packed_loss_weights
    return self.task.train_metric_fn(dict(features, **{name: weights}), outputs)

  def write_train_records(self, path):
    """The task's training records (and the transfer set's) with the teacher's logits beside
    the features (see the module docstring)."""
    num_examples, num_records, what = self.task.write_train_records(path)
    output_dir = self.options.output_dir
    paths = [path]
    num_transfer = 0
    if self.distill.transfer_file:
      write = getattr(self.task, "write_transfer_records", None)
      if write is None:
        raise BertTfError(f"--transfer_file: {self.task.script} takes no transfer set")
      transfer_path = os.path.join(output_dir, TRANSFER_RECORDS)
      num_transfer = write(transfer_path, self.distill.transfer_file)
      paths.append(transfer_path)
      logging.info("  Transfer set: %d records from %s", num_transfer, self.distill.transfer_file)
    logits = self._teacher_logits(paths)
    hard = np.concatenate([np.ones(num_records, bool), np.zeros(num_transfer, bool)])
    _write_with_targets(paths, path, logits, hard, self.weights_name)
    if num_transfer:
      what = f"{what} and transfer records"
    return num_examples + num_transfer, num_records + num_transfer, what

  def _teacher_logits(self, paths):
    """The teacher's logits of the records in paths: cached in output_dir, else predicted (and
    cached with DISTILLATION_FILE)."""
    output_dir = self.options.output_dir
    key = {"teacher": self.teacher.identity(), "records_sha256": _digest(paths),
           "settings": self.distill.settings()}
    cache = os.path.join(output_dir, TEACHER_LOGITS)
    record = _record(output_dir)
    if record and record.get("records_sha256") == key["records_sha256"] and tf.io.gfile.exists(
        cache):
      logits = _read_logits(cache, record.get("logits_sha256"))
      if logits is not None:
        logging.info("Teacher's logits read back from %s", cache)
        return logits
    logits = self.teacher.predict(self.task, paths, self.distill.teacher_batch_size,
                                  self.options.runtime.trim_padding)
    buffer = io.BytesIO()
    np.savez(buffer, logits=logits)
    with fileio.atomic_output(cache) as tmp, tf.io.gfile.GFile(tmp, "wb") as f:
      f.write(buffer.getvalue())
    key["logits_sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()  # checked on reading
    fileio.write_text_atomically(os.path.join(output_dir, DISTILLATION_FILE),
                                 json.dumps(key, indent=2, sort_keys=True) + "\n")
    return logits


def _read_logits(path, sha256):
  """The logits a run cached in `path`, or None (said in a warning: the teacher predicts them
  again) when the file is damaged: cut short, another checksum than the one written
  (runs from before it was written: what the archive itself says), not a NumPy archive."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  damage = None
  if sha256 and hashlib.sha256(data).hexdigest() != sha256:
    damage = f"{len(data):,} bytes, not those written: their sha256 differs"
  elif not data.startswith(b"PK\x03\x04"):
    damage = "not a NumPy archive"
  if damage is None:
    try:
      logits = np.load(io.BytesIO(data))["logits"]
      if logits.dtype == np.float32 and logits.ndim >= 2:
        return logits
      damage = f"an array of {logits.dtype} [{', '.join(map(str, logits.shape))}]"
    except Exception as e:  # pylint: disable=broad-except  (zipfile's, NumPy's)
      damage = f"it does not read ({type(e).__name__}: {e})"
  logging.warning("%s: the teacher's cached soft targets are damaged (%s): predicted again",
                  path, damage)
  return None


def _write_with_targets(paths, output, logits, hard, weights_name):
  """The records of `paths` (read whole first: output may be one of them) with teacher_logit_<j>,
  soft_weights and hard_weights added, as one file at output, atomically."""
  raw = [r.numpy() for path in paths for r in tf.data.TFRecordDataset(path)]
  if len(raw) != len(logits):
    raise BertTfError(f"{paths[0]}: {len(raw)} records but {len(logits)} teacher predictions")
  with fileio.atomic_output(output) as tmp, tf.io.TFRecordWriter(tmp) as writer:
    for record, example_logits, labelled in zip(raw, logits, hard):
      example = tf.train.Example.FromString(record)
      feature = example.features.feature
      weights = list(feature[weights_name].float_list.value) if weights_name else [1.0]
      for j in range(example_logits.shape[-1]):
        feature[teacher_feature(j)].float_list.value.extend(
            example_logits[..., j].reshape(-1).tolist())
      feature[SOFT_WEIGHTS].float_list.value.extend(weights)
      feature[HARD_WEIGHTS].float_list.value.extend(weights if labelled else [0.0] * len(weights))
      writer.write(example.SerializeToString(deterministic=True))

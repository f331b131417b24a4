"""A run's --output_dir as one object. RunDir reads it once, when a job starts: its newest whole
checkpoint, the run it holds (train_run.json: the config and settings it started with, its run
shape), the task it holds (task_config.json) and its vocabulary; RunDir.check answers whether a
run may start afresh there, go on with what is there, or must be refused, and why, for every job
(pretraining, fine-tuning, distillation). claim holds the directory while a run uses it (one run
at a time); check_same_run records how a training run started (train_run.json). The checkpoints
a training run saves there are bert_tf.training.saves'; the files that make it a complete model
directory, bert_tf.model.model_files'."""
import contextlib
import dataclasses
import fcntl
import json
import os
import socket
from typing import Any, Optional

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.training import recovery
from bert_tf.training import saves

RUN_FILE = "train_run.json"
LOCK_FILE = ".bert_tf.lock"  # holds `pid <pid> on <host>` while a run uses the directory
TASK_CONFIG_FILE = tf_checkpoint.TASK_CONFIG_FILE


@dataclasses.dataclass(frozen=True)
class Run:
  """What a run that starts in an output_dir is, as RunDir.check compares it with what the
  directory holds. task: the fine-tuning task (its name, aliases, run_keys and task_config()),
  None for pretraining; run_shape: the options that change what its checkpoints hold or how its
  input is read; head: (causal, BiLSTM units or None) of a fine-tuned model, None where the
  script has no --bilstm_head; causal: whether the model is left to right."""
  training: bool
  config: Any
  run_shape: dict
  train_batch_size: Optional[int] = None
  init_checkpoint: Optional[str] = None
  vocab_file: Optional[str] = None
  task: Any = None
  causal: bool = False
  bilstm_units: Any = None


class RunDir:
  """An output_dir, read once (see the module docstring)."""

  def __init__(self, path):
    self.path = path
    self.latest = tf_checkpoint.latest_checkpoint(path)
    self.task_config = _read_task_config(path)
    self.recorded = _read_run_file(path) if self.latest else None

  def check(self, run):
    """Refuses `run` (a Run) in one BertTfError line when the directory holds another run's
    checkpoints, or files another run left; returns "resume" (training goes on from the latest
    checkpoint), "fresh" or "evaluate" (its checkpoints, or --init_checkpoint, are scored)."""
    if run.training:
      self.check_batch_size(run.train_batch_size)
    self._check_kind(run.task)
    if run.task is not None:
      self._check_head(run)
    if run.training:
      self._check_shape(run.run_shape, run.config)
      self._check_init_checkpoint(run.init_checkpoint)
    elif run.task is None:  # evaluating pretraining checkpoints needs their model
      self._check_shape({"left_to_right": run.run_shape["left_to_right"]}, run.config)
    if run.training or (self.latest and run.task is not None):
      self._check_vocab(run.vocab_file)
    if not run.training:
      return "evaluate"
    return "resume" if self.latest else "fresh"

  def check_batch_size(self, train_batch_size):
    """A training run resumes with the --train_batch_size of the run it holds. Its checkpoints
    count steps of that many examples (the global step, the learning rate's warmup and decay,
    the optimizer's moments, a fine-tuning run's number of steps) and their input position is a
    number of such batches: with another size the run could not go on as it was. A batch that
    does not fit in memory resumes with --gradient_accumulation_steps instead, exactly. Checked
    before TensorFlow starts."""
    was = (self.recorded or {}).get("train_batch_size")
    if was is None or was == train_batch_size:
      return
    raise BertTfError(f"--train_batch_size: {self.path} holds checkpoints of a run with "
                      f"--train_batch_size={was}, not {train_batch_size} (its steps, "
                      f"learning-rate schedule and input position count batches of {was}): pass "
                      f"--train_batch_size={was} to resume it (with --gradient_accumulation_steps "
                      f"if a batch does not fit in memory), or give a new --output_dir")

  def _check_kind(self, task):
    """No run of another kind: a fine-tuning output_dir names its task in task_config.json (with
    the values of its run_keys, compared in any case); a pretraining run's checkpoints hold the
    pretraining heads."""
    recorded = self.task_config
    if recorded is not None:
      if task is None:
        raise BertTfError(f"--output_dir: {self.path} holds a {describe_run(recorded)} run "
                          f"({TASK_CONFIG_FILE}), not a pretraining one: give another "
                          f"--output_dir")
      self._check_task(task, recorded)
      return
    if task is None or not self.latest:
      return
    try:
      names = checkpoints.open_checkpoint(self.latest).shapes
    except (BertTfError,) + checkpoints.READ_ERRORS:
      return  # a damaged checkpoint: restoring it says so
    if any(name.startswith("cls/predictions/") for name in names):
      raise BertTfError(f"--output_dir: {self.path} holds a pretraining run ({self.latest}), not "
                        f"{describe_run(task.task_config())}: fine-tune into another "
                        f"--output_dir, with --init_checkpoint={self.path}")

  def _check_task(self, task, recorded):
    now, recorded = task.task_config(), task.recorded(recorded)
    same = recorded.get("task") == task.name
    differs = [key for key in task.run_keys if _comparable(recorded.get(key)) !=
               _comparable(now.get(key))]
    if same and not differs:
      return
    was, this = f"{describe_run(recorded)} run", describe_run(now)
    if was == f"{this} run":  # the same task with other labels (NER's come from its data)
      was += f" with {', '.join(f'{key}={recorded.get(key)}' for key in differs)}"
      this = f"this run's {', '.join(f'{key}={now.get(key)}' for key in differs)}"
    raise BertTfError(f"--output_dir: {self.path} holds a {was} ({TASK_CONFIG_FILE}), not "
                      f"{this}: give another --output_dir")

  def _check_head(self, run):
    """The checkpoint a fine-tuning run goes on from (the latest; without training, else
    --init_checkpoint) holds the model the flags ask for: left to right or not, and the
    --bilstm_head BiLSTM of the same size or none (a model without it would otherwise read the
    BiLSTM's weights as nothing, or the other way round)."""
    path = self.latest or (None if run.training else run.init_checkpoint)
    if not path:
      return
    try:
      causal, found = checkpoints.left_to_right(path), checkpoints.bilstm_units(path)
    except checkpoints.READ_ERRORS:
      return  # a damaged checkpoint: restoring it says so (training.py)
    if causal != bool(run.causal):
      raise BertTfError(f"--left_to_right: {path} holds a model fine-tuned "
                        f"{'left to right: pass' if causal else 'bidirectionally: leave out'} "
                        f"--left_to_right (or train in a new --output_dir)")
    wanted = run.bilstm_units
    if wanted == "any" or found == wanted:  # "any": a script without --bilstm_head
      return
    if not wanted:
      raise BertTfError(f"--bilstm_head: {path} holds a model with a BiLSTM head ({found} units "
                        f"per direction): pass --bilstm_head --bilstm_hidden_size={found}")
    if not found:
      raise BertTfError(f"--bilstm_head: {path} holds a model without a BiLSTM head: leave "
                        f"--bilstm_head out (or train in a new --output_dir)")
    raise BertTfError(f"--bilstm_hidden_size: {path} holds a BiLSTM head of {found} units per "
                      f"direction, not {wanted}")

  def _check_shape(self, run_shape, config=None):
    """A run resumes with the run shape (e.g. pack_sequences, left_to_right) and config it was
    started with (train_run.json; runs from before the shape was recorded are not checked). A
    BertTfError names the first flag that differs and the value to give."""
    before = self.recorded or {}
    if before and config is not None:
      _check_config(self.path, before, config.to_dict())
    recorded = before.get("run_shape") or {}
    for flag in sorted(run_shape):
      if flag not in recorded or recorded[flag] == run_shape[flag]:
        continue
      was, now = recorded[flag], run_shape[flag]
      if isinstance(was, bool) and isinstance(now, bool):
        made = f"with --{flag}: pass it" if was else f"without --{flag}: leave it out"
      else:
        made = (f"with --{flag}={was}, not {now}: pass --{flag}={was}" if was is not None
                else f"without --{flag}: leave it out")
      raise BertTfError(f"--{flag}: {self.path} holds checkpoints of a run made {made} to resume "
                        f"it, or give a new --output_dir")

  def _check_init_checkpoint(self, init_checkpoint):
    """What a training run starts from is sound: the latest checkpoint to resume (newer damaged
    ones are set aside when training starts: bert_tf.training.recovery) or else
    --init_checkpoint, which must be a checkpoint."""
    if self.latest or not init_checkpoint:
      return
    try:
      checkpoints.detect_format(init_checkpoint)
    except BertTfError as e:
      raise BertTfError(f"--init_checkpoint: {e}") from None

  def _check_vocab(self, vocab_file):
    """A vocab.txt already in the directory is --vocab_file's very vocabulary: it is the one the
    directory's model was made with (or one the user put there); going on with another would
    read every token id as some other token, and copying over it would replace it."""
    vocab_path = os.path.join(self.path, tf_checkpoint.VOCAB_FILE)
    if not vocab_file or not tf.io.gfile.exists(vocab_path) or not tf.io.gfile.exists(
        vocab_file) or model_files.same_vocabulary(vocab_path, vocab_file):
      return
    if self.latest:
      raise BertTfError(f"--vocab_file: {vocab_file} differs from {vocab_path}, the vocabulary "
                        f"of the checkpoints in {self.path}: pass --vocab_file={vocab_path} to go "
                        f"on with them, or give a new --output_dir")
    raise BertTfError(f"--vocab_file: {vocab_file} differs from {vocab_path}, already in "
                      f"--output_dir: give a new --output_dir (or move {vocab_path} aside)")


def _comparable(value):
  return value.lower() if isinstance(value, str) else value


def _read_run_file(output_dir):
  """train_run.json of output_dir, or None."""
  path = os.path.join(output_dir, RUN_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except ValueError:
      raise BertTfError(f"--output_dir: {path} is not valid JSON: move it aside (it records how "
                        f"the run in {output_dir} was started)") from None


def _read_task_config(output_dir):
  """The task_config.json of output_dir (a dict), or None when it has none."""
  path = os.path.join(output_dir, TASK_CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      recorded = json.load(f)
    except ValueError:
      recorded = None
  if not isinstance(recorded, dict):
    raise BertTfError(f"--output_dir: {path} is not a task_config.json of bert_tf (a JSON "
                      f"object): move it aside, or give another --output_dir")
  return recorded


def describe_run(task_config):
  """What a fine-tuning run is, from its task_config.json contents: e.g. "MRPC fine-tuning"."""
  name = task_config.get("task_name") or task_config.get("task") or task_config.get("export_kind")
  return f"{name} fine-tuning" if name else "fine-tuning"


def check_same_run(output_dir, model, settings, run_shape=None):
  """Records the model's config, the training settings and run_shape (see check_run_shape) in
  output_dir/train_run.json; when output_dir already holds a checkpoint, resuming needs the same
  config (a BertTfError if not) and warns about each setting that changed."""
  config = getattr(model, "config", None) or getattr(getattr(model, "encoder", None), "config",
                                                     None)
  config = config.to_dict() if config is not None else {}
  path = os.path.join(output_dir, RUN_FILE)
  if saves.resume_point(output_dir) and tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      before = json.load(f)
    _check_config(output_dir, before, config)
    for key, value in settings.items():
      if key == "gradient_accumulation_steps" and before.get(key, value) != value:
        logging.info("Resuming %s with --%s=%s (the run started with %s): the same batches, in "
                     "%s micro-batches each", output_dir, key, value, before[key], value)
      elif key in before and before[key] != value:
        logging.warning("Resuming %s with %s=%s; the run started with %s", output_dir, key,
                        value, before[key])
    return
  recorded = {"bert_config": config, **settings}
  if run_shape:
    recorded["run_shape"] = run_shape
  write_text_atomically(path, json.dumps(recorded, indent=2, sort_keys=True) + "\n")


def _check_config(output_dir, before, config):
  """The config a run resumes with (a dict) is the one its train_run.json (`before`) records."""
  old_config = before.get("bert_config") or {}
  changed = sorted(k for k in set(old_config) | set(config) if old_config.get(k) != config.get(k))
  if changed:
    raise BertTfError(f"--bert_config_file: {output_dir} holds checkpoints of a model with "
                      f"another config (differs in {', '.join(changed)}): give a new "
                      f"--output_dir, or the config the run started with")


class _Claim:
  """A claimed output_dir, as found: undo() puts it back so after a failed run."""

  def __init__(self, output_dir, created):
    self.output_dir, self.created = output_dir, created
    self.found = set() if created else set(_names(output_dir))
    self.latest = tf_checkpoint.latest_checkpoint(output_dir)

  def undo(self):
    """Unless the run saved a checkpoint: removes the directory the claim created, or what the
    run added to the one it found (record files, model files, its lock); what was there stays."""
    if tf_checkpoint.latest_checkpoint(self.output_dir) != self.latest:
      return
    # Never what recovery set aside (renamed damaged checkpoints): kept, whatever the run did.
    self.found |= {name for name in _names(self.output_dir) if recovery.is_set_aside(name)}
    added = set(_names(self.output_dir)) - self.found
    if any(name.endswith(".index") for name in added):
      return  # a checkpoint was written, though the run ended before it was recorded as latest
    if self.created:
      logging.info("Removing %s: the run that made it ends before its first checkpoint",
                   self.created)
      tf.io.gfile.rmtree(self.created)
      return
    for name in sorted(set(_names(self.output_dir)) - self.found):
      path = os.path.join(self.output_dir, name)
      logging.info("Removing %s: the run that wrote it ends before its first checkpoint", path)
      if tf.io.gfile.isdir(path):
        tf.io.gfile.rmtree(path)
      else:
        tf.io.gfile.remove(path)


def _names(directory):
  return [name.rstrip("/") for name in tf.io.gfile.listdir(directory)] if tf.io.gfile.isdir(
      directory) else []


def _missing_ancestors(path):
  """The outermost directory of `path` (itself included) that does not exist yet, or None; None
  for a URL (gs://...), whose directories are not removed again."""
  if "://" in path:
    return None
  path, missing = os.path.abspath(path), None
  while not os.path.lexists(path):
    missing, path = path, os.path.dirname(path)
  return missing


@contextlib.contextmanager
def claim(output_dir, hold=True):
  """`with claim(output_dir):` makes output_dir (a BertTfError if it is a file) and, with hold
  (the chief of a run), holds it for this process: a second run into the same directory meanwhile
  stops at once with a BertTfError naming the process that holds it. The hold is an flock on
  output_dir/.bert_tf.lock (local directories only), so it ends with the process, however it
  ends: the file a killed run leaves blocks nothing.

  With hold, a run that ends with an exception before it saved a checkpoint leaves output_dir as
  it found it: a directory the claim created is removed again, with everything the run wrote
  into it; from one it found, what the run added is removed (files it rewrote, such as its own
  record files, stay rewritten). So a run that fails on its input, its flags or what the
  directory holds leaves nothing behind."""
  fileio.check_output_directory(output_dir, "--output_dir")
  created = _missing_ancestors(output_dir)
  try:
    tf.io.gfile.makedirs(output_dir)
  except tf.errors.OpError as e:
    raise BertTfError(f"--output_dir: cannot create {output_dir} ({e.message.strip()})") from None
  lock = _lock(output_dir) if hold and "://" not in output_dir else None  # refused: nothing undone
  try:
    held = _Claim(output_dir, created) if hold else None
    try:
      yield
    except BaseException:
      if held is not None:
        held.undo()  # still holding the directory
      raise
  finally:
    if lock is not None:
      _unlock(*lock)


def _lock(output_dir):
  """(file descriptor, path) of output_dir's lock file, held (flock) by this process."""
  path = os.path.join(output_dir, LOCK_FILE)
  while True:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
      os.close(fd)
      raise BertTfError(f"--output_dir: {output_dir} is in use by another run ({holder}, "
                        f"holding {path}): wait for it to end, or give another --output_dir") \
          from None
    try:
      same = os.stat(path).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
      same = False
    if same:  # not a file the previous holder unlinked as it let go
      break
    os.close(fd)
  os.ftruncate(fd, 0)
  os.write(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode())
  return fd, path


def _unlock(fd, path):
  try:
    os.unlink(path)  # while still held, so that no other run holds the unlinked file
  except FileNotFoundError:
    pass
  os.close(fd)

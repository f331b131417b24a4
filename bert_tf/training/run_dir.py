"""What a training run keeps in its --output_dir besides checkpoints: the settings it started with
(train_run.json, checked when it resumes), the checkpoints' name (model.ckpt-N, as the
original's), the final weights alone (bert_model.ckpt) and the cleanup of checkpoint saves a kill
cut short, the hold a run keeps on it (claim: one run at a time) and the checks that a run going
on in it is the run it holds (check_run_shape, check_same_run). The files that make it a complete
model directory are bert_tf.model.model_dir's."""
import contextlib
import fcntl
import json
import os
import re
import socket

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model import checkpoints
from bert_tf.model import model_dir
from bert_tf.training import recovery

RUN_FILE = "train_run.json"
LOCK_FILE = ".bert_tf.lock"  # holds `pid <pid> on <host>` while a run uses the directory
TASK_CONFIG_FILE = model_dir.TASK_CONFIG_FILE
CHECKPOINT_NAME = model_dir.CHECKPOINT_NAME


def check_same_run(output_dir, model, settings, run_shape=None):
  """Records the model's config, the training settings and run_shape (see check_run_shape) in
  output_dir/train_run.json; when output_dir already holds a checkpoint, resuming needs the same
  config (a BertTfError if not) and warns about each setting that changed."""
  config = getattr(model, "config", None) or getattr(getattr(model, "encoder", None), "config",
                                                     None)
  config = config.to_dict() if config is not None else {}
  path = os.path.join(output_dir, RUN_FILE)
  if resume_point(output_dir) and tf.io.gfile.exists(path):
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


def _recorded_run(output_dir):
  """train_run.json of output_dir when it also holds a checkpoint (a run to resume), else None."""
  path = os.path.join(output_dir, RUN_FILE)
  if not model_dir.latest_checkpoint(output_dir) or not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    try:
      return json.load(f)
    except ValueError:
      raise BertTfError(f"--output_dir: {path} is not valid JSON: move it aside (it records how "
                        f"the run in {output_dir} was started)") from None


def check_batch_size(output_dir, train_batch_size):
  """Before a training run resumes output_dir (and before TensorFlow starts): the same
  --train_batch_size as the run it holds (train_run.json). Its checkpoints count steps of that
  many examples (the global step, the learning rate's warmup and decay, the optimizer's moments,
  a fine-tuning run's number of steps) and their input position is a number of such batches: with
  another size the run could not go on as it was. A BertTfError names both values; a batch that
  does not fit in memory resumes with --gradient_accumulation_steps instead, exactly."""
  was = (_recorded_run(output_dir) or {}).get("train_batch_size")
  if was is None or was == train_batch_size:
    return
  raise BertTfError(f"--train_batch_size: {output_dir} holds checkpoints of a run with "
                    f"--train_batch_size={was}, not {train_batch_size} (its steps, learning-rate "
                    f"schedule and input position count batches of {was}): pass "
                    f"--train_batch_size={was} to resume it (with --gradient_accumulation_steps "
                    f"if a batch does not fit in memory), or give a new --output_dir")


def check_run_shape(output_dir, run_shape, config=None):
  """Before a run resumes output_dir: run_shape ({flag name: value}, the options that change what
  its checkpoints hold or how its input is read, e.g. pack_sequences, left_to_right) must be what
  the run was started with (train_run.json's run_shape; runs from before it was recorded are not
  checked), and so must config (a BertConfig), when given. A BertTfError names the first flag
  that differs and the value to give."""
  before = _recorded_run(output_dir) or {}
  if before and config is not None:
    _check_config(output_dir, before, config.to_dict())
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
    raise BertTfError(f"--{flag}: {output_dir} holds checkpoints of a run made {made} to resume "
                      f"it, or give a new --output_dir")


def describe_run(task_config):
  """What a fine-tuning run is, from its task_config.json contents: e.g. "MRPC fine-tuning"."""
  name = task_config.get("task_name") or task_config.get("task") or task_config.get("export_kind")
  return f"{name} fine-tuning" if name else "fine-tuning"


def recorded_task_config(output_dir):
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


def check_run_kind(output_dir, task_config=None):
  """Before a run uses output_dir: it holds no run of another kind. task_config: the fine-tuning
  run's task_config.json contents (whose task the tasks check against the one recorded:
  bert_tf.tasks.base.check_recorded_task), None for pretraining. A fine-tuning output_dir names
  its task in task_config.json; a pretraining run's checkpoints hold the pretraining heads. A
  BertTfError says what the directory holds."""
  recorded = recorded_task_config(output_dir)
  if recorded is not None:
    if task_config is None:
      raise BertTfError(f"--output_dir: {output_dir} holds a {describe_run(recorded)} run "
                        f"({TASK_CONFIG_FILE}), not a pretraining one: give another --output_dir")
    return
  latest = model_dir.latest_checkpoint(output_dir)
  if task_config is None or not latest:
    return
  try:
    names = checkpoints.open_checkpoint(latest).shapes
  except (BertTfError,) + checkpoints.READ_ERRORS:
    return  # a damaged checkpoint: restoring it says so
  if any(name.startswith("cls/predictions/") for name in names):
    raise BertTfError(f"--output_dir: {output_dir} holds a pretraining run ({latest}), not "
                      f"{describe_run(task_config)}: fine-tune into another --output_dir, with "
                      f"--init_checkpoint={output_dir}")


def check_init_checkpoint(output_dir, init_checkpoint):
  """Before a training run writes anything: what it starts from is sound. That is output_dir's
  latest checkpoint to resume (newer damaged ones are set aside when training starts:
  bert_tf.training.recovery) or else --init_checkpoint, which must be a checkpoint (a
  BertTfError naming the flag)."""
  if model_dir.latest_checkpoint(output_dir) or not init_checkpoint:
    return
  try:
    checkpoints.detect_format(init_checkpoint)
  except BertTfError as e:
    raise BertTfError(f"--init_checkpoint: {e}") from None


class _Claim:
  """A claimed output_dir, as found: undo() puts it back so after a failed run."""

  def __init__(self, output_dir, created):
    self.output_dir, self.created = output_dir, created
    self.found = set() if created else set(_names(output_dir))
    self.latest = model_dir.latest_checkpoint(output_dir)

  def undo(self):
    """Unless the run saved a checkpoint: removes the directory the claim created, or what the
    run added to the one it found (record files, model files, its lock); what was there stays."""
    if model_dir.latest_checkpoint(self.output_dir) != self.latest:
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


class _AbandonedRestoreFilter:
  """Drops what TensorFlow logs, when the objects of a failed restore are deleted, about the
  values they never received: the run has already said what is wrong in one line."""

  def filter(self, record):
    message = record.getMessage()
    return not ("deleted with unrestored values" in message or
                "could not be found in the restored object" in message or
                "checkpoint values were not used" in message.lower())


_ABANDONED_RESTORE_FILTER = _AbandonedRestoreFilter()


def silence_abandoned_restore():
  """After a restore failed with a BertTfError: TensorFlow's warnings about its abandoned values
  (logged when they are deleted, after the error line) are dropped."""
  tf.get_logger().addFilter(_ABANDONED_RESTORE_FILTER)


def restore_error(latest, error):
  """The BertTfError for the checkpoint `latest` of output_dir that training could not restore
  (`error`): damaged, or written by a run whose input pipeline or model the flags no longer make
  (one from before check_run_shape's record)."""
  silence_abandoned_restore()
  message = (getattr(error, "message", None) or str(error)).strip().splitlines()
  message = message[0] if message else type(error).__name__
  if "dataset iterator" in message or isinstance(error, AssertionError):
    return BertTfError(
        f"--output_dir: {latest} was written by a run whose "
        f"{'input pipeline' if 'dataset iterator' in message else 'model'} these flags do not "
        f"make (one made with other flags, such as --pack_sequences, --max_seq_length or "
        f"--dynamic_masking): resume it with the flags it was started with, or give a new "
        f"--output_dir")
  return BertTfError(f"{latest}: cannot be read ({message}): the latest checkpoint of "
                     f"--output_dir is damaged; move its files aside to resume from the one "
                     f"before")


def resume_point(output_dir):
  """The checkpoint a training run in output_dir resumes from (model_dir.latest_checkpoint: the
  newest whole one, found by listing), or None to start afresh. A BertTfError when the run would
  come to write over checkpoint files there: an incomplete checkpoint past that point (its step
  would be saved again), or incomplete ones and no whole one (a fresh start would save them
  again). Incomplete checkpoints before it are named in a warning and left alone."""
  latest = model_dir.latest_checkpoint(output_dir)
  found = model_dir.scan_checkpoints(output_dir)
  after = [(prefix, missing) for step, prefix, missing in found.incomplete
           if latest is None or step > _step_of(latest)]
  if after:
    prefix, missing = after[-1]
    start = f"resumed from {latest}" if latest else "started afresh (no whole checkpoint there)"
    raise BertTfError(f"--output_dir: {prefix} is incomplete ({missing}) and a run {start} would "
                      f"write its step again: move its files ({prefix}.*) aside, or give a new "
                      f"--output_dir")
  return latest


def _step_of(prefix):
  return int(prefix.rsplit("-", 1)[1])


def record_checkpoints(output_dir, latest):
  """When output_dir's `checkpoint` state file is missing or names another checkpoint than
  `latest` (resume_point's), writes it anew naming every whole checkpoint there, so that the
  CheckpointManager that goes on saving finds no stale names (it would delete by them) and keeps
  every checkpoint there."""
  named = model_dir.state_file_checkpoint(output_dir)
  if latest is None or (named and os.path.basename(named) == os.path.basename(latest)):
    return
  model_dir.write_state_file(output_dir, [os.path.basename(prefix) for _, prefix in
                                          model_dir.scan_checkpoints(output_dir).whole])


def remove_unfinished_saves(output_dir):
  """Removes the model.ckpt-N_temp directories a save killed half-way leaves (TensorFlow writes
  each checkpoint there first; ckpt-N_temp before checkpoints were named as the original's);
  finished checkpoints are never in them."""
  for name in tf.io.gfile.listdir(output_dir):
    name = name.rstrip("/")
    if re.fullmatch(r"(model\.)?ckpt-\d+_temp", name):
      path = os.path.join(output_dir, name)
      logging.info("Removing %s, left by a checkpoint save that was killed", path)
      tf.io.gfile.rmtree(path)


def export_weights(model, output_dir):
  """Writes the trained weights alone (no optimizer state), heads included, as the original-layout
  TF1 checkpoint output_dir/bert_model.ckpt; returns its prefix."""
  path = checkpoints.save_tf1_checkpoint(model, os.path.join(output_dir, model_dir.WEIGHTS_CHECKPOINT),
                                         with_head=True)
  logging.info("Wrote the final weights as %s (TF1 layout, no optimizer state)", path)
  return path

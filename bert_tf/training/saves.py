"""The checkpoints a training run saves in its --output_dir, as the loop goes on with them: where
it resumes (resume_point: the newest whole one, found by listing), the `checkpoint` state file
written anew when it is stale, the saves a kill cut short, the final weights alone
(bert_model.ckpt, as Google's releases name them), and what a checkpoint that cannot be restored
means (restore_error). Whether a run may go on in the directory at all is
bert_tf.training.run_dir's."""
import os
import re

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint

CHECKPOINT_NAME = tf_checkpoint.CHECKPOINT_NAME


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
  """The checkpoint a training run in output_dir resumes from (tf_checkpoint.latest_checkpoint: the
  newest whole one, found by listing), or None to start afresh. A BertTfError when the run would
  come to write over checkpoint files there: an incomplete checkpoint past that point (its step
  would be saved again), or incomplete ones and no whole one (a fresh start would save them
  again). Incomplete checkpoints before it are named in a warning and left alone."""
  latest = tf_checkpoint.latest_checkpoint(output_dir)
  found = tf_checkpoint.scan_checkpoints(output_dir)
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
  named = tf_checkpoint.state_file_checkpoint(output_dir)
  if latest is None or (named and os.path.basename(named) == os.path.basename(latest)):
    return
  tf_checkpoint.write_state_file(output_dir, [os.path.basename(prefix) for _, prefix in
                                          tf_checkpoint.scan_checkpoints(output_dir).whole])


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
  path = checkpoints.save_tf1_checkpoint(model, os.path.join(output_dir, tf_checkpoint.WEIGHTS_CHECKPOINT),
                                         with_head=True)
  logging.info("Wrote the final weights as %s (TF1 layout, no optimizer state)", path)
  return path

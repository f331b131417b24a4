"""A training run that finds its newest checkpoints damaged goes on from the newest whole one,
without being asked, as a database recovers to its last whole state: the damaged ones (a power
loss cut a .data file short, a save or a copy left a file out: bert_tf.model.formats.tf_checkpoint's listing
says which; or TensorFlow cannot read a tensor, a checksum wrong) are named in one warning and
their files renamed aside, never deleted, under names no later save can write over:

  model.ckpt-6.index, model.ckpt-6.data-00000-of-00001
      -> model.ckpt-6.damaged-1.index, model.ckpt-6.damaged-1.data-00000-of-00001

(still a checkpoint TensorFlow can try to read, as model.ckpt-6.damaged-1; the number is the first
one no earlier set-aside of that step took). Only the chief of a run renames; every worker reads
the same listing, which skips them already.
"""
import os
import re

from absl import logging
import tensorflow as tf

from bert_tf import errors
from bert_tf.model.formats import tf_checkpoint

MARK = ".damaged-"  # in the names of the files set aside
_FILE = r"\.(index|data-\d+-of-\d+)"


def is_set_aside(name):
  """Whether a file name is one set_aside gave."""
  return re.search(re.escape(MARK) + r"\d+" + _FILE + "$", name) is not None


def set_aside_damaged(output_dir):
  """Sets aside every checkpoint of output_dir newer than its newest whole one (the newest whole
  one is then the latest: training resumes from it, or starts afresh without one). The warning
  is tf_checkpoint.latest_checkpoint's, one per checkpoint. Returns the new prefixes."""
  tf_checkpoint.latest_checkpoint(output_dir)  # says what is skipped, once
  found = tf_checkpoint.scan_checkpoints(output_dir)
  newest = found.whole[-1][0] if found.whole else -1
  return [set_aside(prefix) for step, prefix, _ in found.incomplete if step > newest]


def set_aside_unreadable(prefix, error):
  """Sets aside the checkpoint `prefix`, which TensorFlow could not restore (`error`, of a
  damaged file: a tensor's checksum), with one warning; returns the new prefix."""
  message = errors.op_message(getattr(error, "message", None) or str(error)) or "damaged"
  return set_aside(prefix, f"{prefix} cannot be read ({message[:200]})")


def set_aside(prefix, why=None):
  """Renames the checkpoint files of `prefix` (<prefix>.index, <prefix>.data-*) to
  <prefix>.damaged-<n>.* and returns <prefix>.damaged-<n>; said in a warning, `why` first, or
  (when latest_checkpoint has warned already) an info line. A `checkpoint` state file that names
  it names the whole checkpoints left."""
  directory, name = os.path.split(prefix)
  names = [entry.rstrip("/") for entry in tf.io.gfile.listdir(directory or ".")]
  taken = [int(m.group(1)) for m in (re.fullmatch(re.escape(name + MARK) + r"(\d+)" + _FILE, n)
                                     for n in names) if m]
  moved = f"{prefix}{MARK}{max(taken, default=0) + 1}"
  said = f"its files are set aside as {moved}.*: never written over, never deleted"
  if why:
    logging.warning("%s: %s; going on from the newest checkpoint before it", why, said)
  else:
    logging.info("%s: %s", prefix, said)
  for entry in names:
    match = re.fullmatch(re.escape(name) + _FILE, entry)
    if match:
      tf.io.gfile.rename(os.path.join(directory, entry), f"{moved}.{match.group(1)}",
                         overwrite=False)
  named = tf_checkpoint.state_file_checkpoint(directory)
  if named and os.path.basename(named) == name:
    whole = [os.path.basename(p) for _, p in tf_checkpoint.scan_checkpoints(directory).whole]
    if whole:
      tf_checkpoint.write_state_file(directory, whole)
  return moved

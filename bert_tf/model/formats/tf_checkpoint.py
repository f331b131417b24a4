"""TensorFlow checkpoints as a model: the original's TF1 name-based ones (Google's releases) and
ours (object-based, a run's output_dir). Their config and vocabulary are the files beside them, as
Google's releases keep them (bert_config.json, vocab.txt), and a fine-tuning run's output_dir
records its casing in task_config.json. None of these is authoritative: a flag replaces each (a
config with other dropout rates, a first-layers-only model, are the user's to choose)."""
import json
import os
import re

import tensorflow as tf

from bert_tf.model import model_dir
from bert_tf.model.formats.base import Described

NAME = "tf"  # tf1 or tf2, told apart by reading the checkpoint (checkpoints.detect_format)


def checkpoint_prefix(path):
  """The checkpoint prefix `path` names (a prefix, one of its files or a directory), or None."""
  if tf.io.gfile.isdir(path):
    latest = model_dir.latest_checkpoint(path)
    if latest:
      return latest
    indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
    return indexes[-1][:-len(".index")] if len(indexes) == 1 else None
  if path.endswith(".index") and tf.io.gfile.exists(path):
    return path[:-len(".index")]
  data = re.fullmatch(r"(.+)\.data-\d+-of-\d+", path)  # a data shard named: its checkpoint
  if data and tf.io.gfile.exists(data.group(1) + ".index"):
    return data.group(1)
  if tf.io.gfile.exists(path + ".index"):
    return path
  return None


def _beside(directory, name):
  path = os.path.join(directory or ".", name)
  return path if tf.io.gfile.exists(path) else None


def _recorded_casing(directory):
  """do_lower_case of a fine-tuning run's task_config.json in `directory`, or None."""
  path = _beside(directory, model_dir.TASK_CONFIG_FILE)
  if not path:
    return None
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      recorded = json.loads(f.read().decode("utf-8-sig"))
  except (ValueError, tf.errors.OpError):
    return None  # a damaged file is named where it is read as a run's (run_dir, export)
  value = recorded.get("do_lower_case") if isinstance(recorded, dict) else None
  return value if isinstance(value, bool) else None


def describe(path):
  """A Described of a TF checkpoint (a prefix, or a directory that holds one), else None."""
  prefix = checkpoint_prefix(path)
  if prefix is None:
    return None
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(prefix)
  return Described(format=NAME, weights=prefix,
                   config_file=_beside(directory, model_dir.CONFIG_FILE),
                   vocab_file=_beside(directory, model_dir.VOCAB_FILE),
                   do_lower_case=_recorded_casing(directory))

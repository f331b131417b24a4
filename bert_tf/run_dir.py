"""What a training run keeps in its --output_dir besides checkpoints: the settings it started with
(train_run.json, checked when it resumes), the checkpoints' name (model.ckpt-N, as the
original's), the final weights alone (bert_model.ckpt) and the cleanup of checkpoint saves a kill
cut short. The files that make it a complete model directory are bert_tf.model_dir's."""
import json
import os
import re

from absl import logging
import tensorflow as tf

from bert_tf import checkpoints
from bert_tf import model_dir
from bert_tf.errors import BertTfError
from bert_tf.fileio import write_text_atomically

RUN_FILE = "train_run.json"
CHECKPOINT_NAME = "model.ckpt"  # checkpoints are model.ckpt-<step>, as the original's Estimator


def check_same_run(output_dir, model, settings):
  """Records the model's config and the training settings in output_dir/train_run.json; when
  output_dir already holds a checkpoint, resuming needs the same config (a BertTfError if not)
  and warns about each setting that changed."""
  config = getattr(model, "config", None) or getattr(getattr(model, "encoder", None), "config",
                                                     None)
  config = config.to_dict() if config is not None else {}
  path = os.path.join(output_dir, RUN_FILE)
  if tf.train.latest_checkpoint(output_dir) and tf.io.gfile.exists(path):
    with tf.io.gfile.GFile(path) as f:
      before = json.load(f)
    old_config = before.get("bert_config") or {}
    changed = sorted(k for k in set(old_config) | set(config) if old_config.get(k) != config.get(k))
    if changed:
      raise BertTfError(f"--bert_config_file: {output_dir} holds checkpoints of a model with "
                        f"another config (differs in {', '.join(changed)}): give a new "
                        f"--output_dir, or the config the run started with")
    for key, value in settings.items():
      if key in before and before[key] != value:
        logging.warning("Resuming %s with %s=%s; the run started with %s", output_dir, key,
                        value, before[key])
    return
  write_text_atomically(path, json.dumps({"bert_config": config, **settings}, indent=2,
                                         sort_keys=True) + "\n")


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

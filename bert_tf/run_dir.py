"""What a training run keeps in its --output_dir besides checkpoints: the settings it started with
(train_run.json, checked when it resumes) and the cleanup of checkpoint saves a kill cut short."""
import json
import os
import re

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.fileio import write_text_atomically

RUN_FILE = "train_run.json"


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
  """Removes the ckpt-N_temp directories a save killed half-way leaves (TensorFlow writes each
  checkpoint there first); finished checkpoints are never in them."""
  for name in tf.io.gfile.listdir(output_dir):
    name = name.rstrip("/")
    if re.fullmatch(r"ckpt-\d+_temp", name):
      path = os.path.join(output_dir, name)
      logging.info("Removing %s, left by a checkpoint save that was killed", path)
      tf.io.gfile.rmtree(path)

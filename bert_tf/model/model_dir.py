"""A model directory in the layout of Google's releases: bert_config.json, vocab.txt and the
weights side by side, so that --bert_config_file, --vocab_file and --init_checkpoint can all point
into it. Every directory bert_tf writes a model into (a training run's --output_dir,
convert_checkpoint.py's output) gets the first two here."""
import os

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io.fileio import atomic_output
from bert_tf.model.config import BertConfig

CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
TASK_CONFIG_FILE = "task_config.json"  # what a fine-tuning run was: read by predictor and export
WEIGHTS_CHECKPOINT = "bert_model.ckpt"  # the final weights alone, as Google's releases name them


def _read_bytes(path):
  with tf.io.gfile.GFile(path, "rb") as f:
    return f.read()


def _write_bytes(path, contents):
  with atomic_output(path) as tmp:
    with tf.io.gfile.GFile(tmp, "wb") as f:
      f.write(contents)


def _config_or_none(path):
  try:
    return BertConfig.from_json_file(path)
  except BertTfError:
    return None


def write_model_files(output_dir, config, vocab_file=None):
  """Writes bert_config.json (unless config is None) (and a copy of vocab_file as vocab.txt) into output_dir, so that
  --bert_config_file, --vocab_file and --init_checkpoint can all point into it.

  A file of that name already there that says something else is the user's: it is left as it is,
  with a warning (nothing the user wrote is replaced).
  """
  tf.io.gfile.makedirs(output_dir)
  config_path = os.path.join(output_dir, CONFIG_FILE)
  if config is None:
    pass
  elif not tf.io.gfile.exists(config_path):
    config.to_json_file(config_path)
  elif _config_or_none(config_path) != config:
    logging.warning("%s already exists and describes another model: left as it is", config_path)
  if not vocab_file:
    return
  vocab_path = os.path.join(output_dir, VOCAB_FILE)
  vocab = _read_bytes(vocab_file)
  if not tf.io.gfile.exists(vocab_path):
    _write_bytes(vocab_path, vocab)
  elif _read_bytes(vocab_path) != vocab:
    logging.warning("%s already exists and differs from --vocab_file %s: left as it is",
                    vocab_path, vocab_file)


def check_vocab(output_dir, vocab_file):
  """Before a training run writes into output_dir (or evaluates the checkpoints there): a
  vocab.txt already in output_dir must be --vocab_file's very vocabulary. It is the vocabulary
  the directory's model was made with (or one the user put there): going on with another would
  read every token id as some other token, and copying over it would replace it. A BertTfError
  names both files."""
  vocab_path = os.path.join(output_dir, VOCAB_FILE)
  if not vocab_file or not tf.io.gfile.exists(vocab_path):
    return
  if not tf.io.gfile.exists(vocab_file) or _read_bytes(vocab_path) == _read_bytes(vocab_file):
    return
  if tf.train.latest_checkpoint(output_dir):
    raise BertTfError(f"--vocab_file: {vocab_file} differs from {vocab_path}, the vocabulary of "
                      f"the checkpoints in {output_dir}: pass --vocab_file={vocab_path} to go on "
                      f"with them, or give a new --output_dir")
  raise BertTfError(f"--vocab_file: {vocab_file} differs from {vocab_path}, already in "
                    f"--output_dir: give a new --output_dir (or move {vocab_path} aside)")


def vocab_beside(path):
  """vocab.txt in the directory `path` is or names a file of (a checkpoint prefix, a Hugging Face
  directory), or None."""
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
  candidate = os.path.join(directory or ".", VOCAB_FILE)
  return candidate if tf.io.gfile.exists(candidate) else None

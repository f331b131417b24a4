"""A Hugging Face BERT directory as a model: model.safetensors with transformers' config.json
(its names; its "gelu" is the erf form), vocab.txt and tokenizer_config.json's do_lower_case.
The directory is the model (authoritative): a flag the user gave may only agree with it. Its
weights are read by bert_tf.model.checkpoints (transformers' names mapped to the original's)."""
import json
import os

from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.model.formats.base import Described

NAME = "hf"
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
VOCAB_NAME = "vocab.txt"


def weights_file(path):
  """The model.safetensors that `path` is or holds, or None."""
  if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, WEIGHTS_NAME)):
    return os.path.join(path, WEIGHTS_NAME)
  if path.endswith(".safetensors") and tf.io.gfile.exists(path):
    return path
  return None


def read_json_value(path):
  """A JSON file of the model's (any JSON value), or None when absent; a one-line error naming
  it when it does not parse."""
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "rb") as f:
    try:
      return json.loads(f.read().decode("utf-8-sig"))
    except ValueError as e:
      raise BertTfError(f"{path}: not valid JSON ({e})") from None


def read_json(path):
  """A JSON object file of the model's, or None when absent (read_json_value)."""
  value = read_json_value(path)
  if value is None:
    return None
  if not isinstance(value, dict):
    raise BertTfError(f"{path}: expected a JSON object")
  return value


def read_config(path):
  """The BertConfig of a transformers config.json."""
  d = read_json(path)
  if d.get("layer_norm_eps", 1e-12) != 1e-12:
    logging.warning("%s: layer_norm_eps %s; BERT (and we) use 1e-12", path, d["layer_norm_eps"])
  return BertConfig.from_dict(d, source=path, hugging_face=True)


def describe(path):
  """A Described of a Hugging Face directory (or its model.safetensors), else None."""
  weights = weights_file(path)
  if weights is None:
    return None
  directory = os.path.dirname(weights) or "."
  config_path = os.path.join(directory, CONFIG_NAME)
  config = read_config(config_path) if tf.io.gfile.exists(config_path) else None
  tokenizer = read_json(os.path.join(directory, TOKENIZER_CONFIG_NAME)) or {}
  casing = tokenizer.get("do_lower_case")
  vocab = os.path.join(directory, VOCAB_NAME)
  return Described(format=NAME, weights=weights, config=config,
                   config_file=config_path if config else None,
                   vocab_file=vocab if tf.io.gfile.exists(vocab) else None,
                   do_lower_case=casing if isinstance(casing, bool) else None,
                   authoritative=True)

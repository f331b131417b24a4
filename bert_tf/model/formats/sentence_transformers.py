"""A sentence-transformers model directory as a model: a Hugging Face BERT directory (its
Transformer module: the directory itself, or the folder modules.json names) with modules.json,
the Pooling module's config.json and, usually, a Normalize entry (which may have no folder, as in
all-MiniLM-L6-v2). Its weights, config, vocabulary and casing are the Hugging Face directory's
(hugging_face.describe: format "hf", read by bert_tf.model.checkpoints as such); what this format
adds is in the Described's extras:

  pooling         "cls", "mean", "max" or "mean_sqrt_len" (sentence-transformers' cls is the
                  first token's hidden state, not BERT's pooler), or None when the model pools
                  otherwise (then `unsupported` says how);
  normalize       whether a Normalize module follows the pooling (unit-length vectors);
  max_seq_length  sentence_bert_config.json's, the length the model's encode() truncates to;
  unsupported     None, or what of the model bert_tf does not reproduce (a Dense module,
                  weighted-mean or last-token pooling, several pooling modes at once): the
                  encoder still loads, pooled vectors of it are refused where they are asked for.

sequence_length(...) is --max_seq_length or, left out, the model's own (extract_features.py and
export_savedmodel.py read it, so that their vectors are encode()'s for long texts too).
"""
import dataclasses
import os

import tensorflow as tf

from bert_tf.model.formats import hugging_face

NAME = "sentence_transformers"
MODULES_FILE = "modules.json"
SETTINGS_FILE = "sentence_bert_config.json"
POOLING_CONFIG = "config.json"
# 1_Pooling/config.json's names of the poolings bert_tf computes (the boolean keys of
# sentence-transformers 2 and the pooling_mode strings of later releases).
POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len",
                "pooling_mode_weightedmean_tokens": "weightedmean",
                "pooling_mode_lasttoken": "lasttoken"}
POOLING_NAMES = {"cls": "cls", "mean": "mean", "max": "max", "mean_sqrt_len_tokens": "mean_sqrt_len",
                 "mean_sqrt_len": "mean_sqrt_len", "weightedmean": "weightedmean",
                 "lasttoken": "lasttoken"}
SUPPORTED_POOLINGS = ("cls", "mean", "max", "mean_sqrt_len")


def _modules(directory):
  """modules.json's entries as [(kind, path)] (kind: the class name, e.g. "Pooling"), or None
  when the directory has no modules.json."""
  entries = hugging_face.read_json_value(os.path.join(directory, MODULES_FILE))
  if not isinstance(entries, list):
    return None
  return [(str(e.get("type", "")).rsplit(".", 1)[-1], str(e.get("path", "")))
          for e in entries if isinstance(e, dict)]


def _pooling(config, path):
  """(pooling or None, what is unsupported or None) of a Pooling module's config.json."""
  mode = config.get("pooling_mode")
  if isinstance(mode, str):
    modes = [mode]
  elif isinstance(mode, list):
    modes = [str(m) for m in mode]
  else:
    modes = [name for key, name in POOLING_KEYS.items() if config.get(key)]
  modes = [POOLING_NAMES.get(m, m) for m in modes]
  if len(modes) != 1:
    return None, f"{path} concatenates {len(modes)} poolings ({', '.join(modes) or 'none'})"
  if modes[0] not in SUPPORTED_POOLINGS:
    return None, f"{path} asks for {modes[0]} pooling"
  return modes[0], None


def describe(path):
  """The Described of a sentence-transformers directory (hugging_face's, with the extras the
  module docstring lists), else None."""
  if not tf.io.gfile.isdir(path):
    return None
  modules = _modules(path)
  if not modules:
    return None
  kinds = [kind for kind, _ in modules]
  if "Transformer" not in kinds or "Pooling" not in kinds:
    return None
  transformer = os.path.join(path, dict(modules)["Transformer"]).rstrip("/") or path
  described = hugging_face.describe(transformer)
  if described is None:
    return None
  pooling_config = os.path.join(path, dict(modules)["Pooling"], POOLING_CONFIG)
  pooling, unsupported = _pooling(hugging_face.read_json(pooling_config) or {}, pooling_config)
  others = [kind for kind in kinds if kind not in ("Transformer", "Pooling", "Normalize")]
  if others and not unsupported:
    unsupported = f"{os.path.join(path, MODULES_FILE)} has a {others[0]} module after the pooling"
  settings = hugging_face.read_json(os.path.join(transformer, SETTINGS_FILE)) or {}
  length = settings.get("max_seq_length")
  extras = {"pooling": pooling, "normalize": "Normalize" in kinds,
            "max_seq_length": length if isinstance(length, int) and length > 0 else None,
            "unsupported": unsupported}
  return dataclasses.replace(described, extras=extras)


def sequence_length(described, max_seq_length, given, config):
  """--max_seq_length (max_seq_length), or where it was left out (given: the flags the user gave;
  None: all that have a value) the sentence-transformers model's own, the length its encode()
  truncates to, within the config's positions. described: the model's Described, or None."""
  own = (described.extras if described else {}).get("max_seq_length")
  if own is None or given is None or "max_seq_length" in given:
    return max_seq_length
  return min(own, config.max_position_embeddings)

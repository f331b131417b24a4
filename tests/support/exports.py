"""SavedModel checks: the tiny export config with the released vocabularies, and features as model
inputs."""
import os

import numpy as np
import tensorflow as tf

from bert_tf.model.config import BertConfig
from support.paths import shared_data
from support.tiny import SIZES

TINY = dict(SIZES, max_position_embeddings=512, type_vocab_size=2)


def vocab_path(cased=False):
  name = "bert-base-cased-vocab.txt" if cased else "bert-base-uncased-vocab.txt"
  return os.path.join(shared_data("vocab"), name)


def tiny_config(vocab_size):
  return BertConfig(vocab_size=vocab_size, **TINY)


def model_inputs(features):
  return {name: tf.constant(np.array([getattr(f, name) for f in features], np.int32))
          for name in ("input_ids", "input_mask", "segment_ids")}


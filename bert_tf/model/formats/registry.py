"""The model formats, in the order a path is tried: the most specific files first (a directory
can hold a sentence-transformers model's files beside a Hugging Face model's, a keras-hub preset
has a config.json as a Hugging Face model does, and a TF Hub SavedModel's variables are a TF
checkpoint)."""
from bert_tf.model.formats import hugging_face
from bert_tf.model.formats import keras_hub
from bert_tf.model.formats import sentence_transformers
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model.formats import tfhub

FORMATS = (sentence_transformers, hugging_face, keras_hub, tfhub, tf_checkpoint)


def describe(path):
  """The Described of the first format that reads `path`, or None."""
  for module in FORMATS:
    described = module.describe(path)
    if described is not None:
      return described
  return None


def module(name):
  """The format module of that NAME."""
  return next(m for m in FORMATS if m.NAME == name)

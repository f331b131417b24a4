"""The model formats, in the order a path is tried: the most specific files first (a directory
can hold a sentence-transformers model's files beside a Hugging Face model's, and a TF Hub
SavedModel's variables are a TF checkpoint)."""
from bert_tf.model.formats import hugging_face
from bert_tf.model.formats import tf_checkpoint

FORMATS = (hugging_face, tf_checkpoint)


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

"""A model directory written whole or not at all (a TF Hub pair, a keras-hub preset): built under
a temporary name beside it and renamed when complete, so that a failed or killed conversion
leaves no half-written model and nothing the user had there is replaced."""
import contextlib
import os

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio


def check_new(path, flag="--output"):
  """`path` may become a model directory: absent, or an empty directory."""
  if tf.io.gfile.exists(path) and (not tf.io.gfile.isdir(path) or tf.io.gfile.listdir(path)):
    raise BertTfError(f"{flag}: {path} already exists and is not an empty directory: name a new "
                      f"directory (nothing there is replaced)")


@contextlib.contextmanager
def new_directory(path, flag="--output"):
  """Yields a temporary directory beside `path`, renamed to `path` when the block succeeds and
  removed (this process's own) whatever fails."""
  path = path.rstrip("/") or path
  check_new(path, flag)
  parent = os.path.dirname(path)
  if parent:
    tf.io.gfile.makedirs(parent)
  tmp = fileio.temporary_name(path)
  if tf.io.gfile.exists(tmp):
    tf.io.gfile.rmtree(tmp)  # this very process's, from an attempt that was interrupted
  tf.io.gfile.makedirs(tmp)
  try:
    yield tmp
    if tf.io.gfile.isdir(path) and not tf.io.gfile.listdir(path):
      tf.io.gfile.rmtree(path)  # an empty directory: the rename takes its place
    tf.io.gfile.rename(tmp, path)
  finally:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.rmtree(tmp)

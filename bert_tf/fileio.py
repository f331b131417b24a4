"""Output files that appear whole or not at all: write to a temporary name, then rename."""
import contextlib
import os

import tensorflow as tf


def temporary_name(path):
  return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_output(path):
  """Yields a temporary path to write; renames it to `path` only if the block succeeds."""
  tmp = temporary_name(path)
  try:
    yield tmp
  except BaseException:
    if tf.io.gfile.exists(tmp):
      tf.io.gfile.remove(tmp)
    raise
  tf.io.gfile.rename(tmp, path, overwrite=True)


def write_text_atomically(path, text):
  with atomic_output(path) as tmp:
    with tf.io.gfile.GFile(tmp, "w") as writer:
      writer.write(text)

"""Files on local disk or behind a URL (gs://, hdfs://, ...), and output that appears whole or not at all.

Local paths use Python's own I/O; only a URL imports TensorFlow for tf.io.gfile. create_pretraining_data
runs without TensorFlow this way: importing it takes longer than making a small corpus's records.
"""
import contextlib
import glob as _glob
import os


def is_url(path):
  return "://" in path


class TensorFlowOnFirstUse:
  """`tensorflow`, imported when an attribute is first used (here and in records.py)."""

  def __getattr__(self, name):
    import tensorflow  # pylint: disable=g-import-not-at-top
    return getattr(tensorflow, name)


tf = TensorFlowOnFirstUse()


def exists(path):
  return tf.io.gfile.exists(path) if is_url(path) else os.path.exists(path)


def glob(pattern):
  return tf.io.gfile.glob(pattern) if is_url(pattern) else _glob.glob(pattern)


def remove(path):
  if is_url(path):
    tf.io.gfile.remove(path)
  else:
    os.remove(path)


def rename(src, dst):
  """Replaces dst if it exists."""
  if is_url(src) or is_url(dst):
    tf.io.gfile.rename(src, dst, overwrite=True)
  else:
    os.replace(src, dst)


def open_file(path, mode="r"):
  """open(path, mode), or tf.io.gfile.GFile for a URL."""
  if is_url(path):
    return tf.io.gfile.GFile(path, mode)
  return open(path, mode, encoding=None if "b" in mode else "utf-8")


def temporary_name(path):
  return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_output(path):
  """Yields a temporary path to write; renames it to `path` only if the block succeeds."""
  tmp = temporary_name(path)
  try:
    yield tmp
  except BaseException:
    if exists(tmp):
      remove(tmp)
    raise
  rename(tmp, path)


def write_text_atomically(path, text):
  with atomic_output(path) as tmp:
    with open_file(tmp, "w") as writer:
      writer.write(text)

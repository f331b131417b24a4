"""Files on local disk or behind a URL (gs://, hdfs://, ...), and output that appears whole or not at all.

Local paths use Python's own I/O; only a URL imports TensorFlow for tf.io.gfile. create_pretraining_data
runs without TensorFlow this way: importing it takes longer than making a small corpus's records.
"""
import contextlib
import glob as _glob
import io
import os
import re
import shutil

from bert_tf.errors import BertTfError


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


def read_lines(path):
  """The lines of a UTF-8 text file as the original release read them (iterating a tf.gfile):
  split after each "\n" only, never on the other characters str.splitlines() takes for line
  ends (U+2028, U+0085, \x0b, \x1c ...), with every "\r" dropped, as TensorFlow's line reader
  drops them. A byte order mark at the start is dropped too."""
  if not exists(path):
    raise BertTfError(f"{path}: file not found")
  with open_file(path, "rb") as f:
    data = f.read()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise BertTfError(f"{path}: not UTF-8 text (byte {e.start} is {data[e.start]:#04x})") from None
  return io.StringIO(text.lstrip("\ufeff").replace("\r", ""), newline="\n").readlines()


def temporary_name(path):
  return f"{path}.tmp-{os.getpid()}"


@contextlib.contextmanager
def atomic_output(path):
  """Yields a temporary path to write; renames it to `path` only if the block succeeds. The
  temporary file is removed whatever fails, the rename included."""
  tmp = temporary_name(path)
  try:
    yield tmp
    rename(tmp, path)
  except BaseException:
    if exists(tmp):
      remove(tmp)
    raise


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def remove_stale_temporaries(path):
  """Removes what earlier runs writing `path` left behind when killed: `path`.tmp-<pid> files and
  `.<name>.spool-<pid>-*` directories beside it, of processes that no longer run. Returns the
  paths removed. (Local paths only; nothing else is touched.)"""
  if is_url(path):
    return []
  directory, name = os.path.split(os.path.abspath(path))
  if not os.path.isdir(directory):
    return []
  pattern = re.compile(r"(?:" + re.escape(name) + r"\.tmp-(\d+)|\." + re.escape(name) +
                       r"\.spool-(\d+)-\w+)$")
  removed = []
  for entry in os.listdir(directory):
    match = pattern.match(entry)
    if not match or _pid_alive(int(match.group(1) or match.group(2))):
      continue
    stale = os.path.join(directory, entry)
    if os.path.isdir(stale) and not os.path.islink(stale):
      shutil.rmtree(stale, ignore_errors=True)
    else:
      os.remove(stale)
    removed.append(stale)
  return removed


def write_text_atomically(path, text):
  with atomic_output(path) as tmp:
    with open_file(tmp, "w") as writer:
      writer.write(text)

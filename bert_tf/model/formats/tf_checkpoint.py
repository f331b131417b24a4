"""TensorFlow checkpoints as a model: the original's TF1 name-based ones (Google's releases) and
ours (object-based, a run's output_dir). Their config and vocabulary are the files beside them, as
Google's releases keep them (bert_config.json, vocab.txt), and a fine-tuning run's output_dir
records its casing in task_config.json. None of these is authoritative: a flag replaces each (a
config with other dropout rates, a first-layers-only model, are the user's to choose).

The checkpoints a directory holds are found by listing it (latest_checkpoint, scan_checkpoints), as
Orbax and databases find the last whole state, not by trusting the `checkpoint` file alone: that
file is missing or stale after a copy of the checkpoints to another disk, and a run that believed
it would start again from step 0 and write over them."""
import collections
import json
import os
import re

from absl import logging
import tensorflow as tf

from bert_tf.io import integrity
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model.formats.base import Described

NAME = "tf"  # tf1 or tf2, told apart by reading the checkpoint (checkpoints.detect_format)
# The files of Google's release layout, which every directory bert_tf writes a model into keeps.
CONFIG_FILE = "bert_config.json"
VOCAB_FILE = "vocab.txt"
TASK_CONFIG_FILE = "task_config.json"  # what a fine-tuning run was: read by predictor and export
WEIGHTS_CHECKPOINT = "bert_model.ckpt"  # the final weights alone, as Google's releases name them
CHECKPOINT_NAME = "model.ckpt"  # checkpoints are model.ckpt-<step>, as the original's Estimator
# model.ckpt-<step> (ckpt-<step>: runs from before checkpoints were named as the original's) and
# each of its files: <prefix>.index, <prefix>.data-<shard>-of-<shards>.
_CHECKPOINT_FILE = re.compile(r"^(?P<prefix>(?:model\.)?ckpt-(?P<step>\d+))"
                              r"\.(?:index|data-(?P<shard>\d+)-of-(?P<shards>\d+))$")


def checkpoint_prefix(path):
  """The checkpoint prefix `path` names (a prefix, one of its files or a directory), or None."""
  if tf.io.gfile.isdir(path):
    latest = latest_checkpoint(path)
    if latest:
      return latest
    indexes = sorted(tf.io.gfile.glob(os.path.join(path, "*.index")))
    return indexes[-1][:-len(".index")] if len(indexes) == 1 else None
  if path.endswith(".index") and tf.io.gfile.exists(path):
    return path[:-len(".index")]
  data = re.fullmatch(r"(.+)\.data-\d+-of-\d+", path)  # a data shard named: its checkpoint
  if data and tf.io.gfile.exists(data.group(1) + ".index"):
    return data.group(1)
  if tf.io.gfile.exists(path + ".index"):
    return path
  return None


def _beside(directory, name):
  path = os.path.join(directory or ".", name)
  return path if tf.io.gfile.exists(path) else None


def _recorded_casing(directory):
  """do_lower_case of a fine-tuning run's task_config.json in `directory`, or None."""
  path = _beside(directory, TASK_CONFIG_FILE)
  if not path:
    return None
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      recorded = json.loads(f.read().decode("utf-8-sig"))
  except (ValueError, tf.errors.OpError):
    return None  # a damaged file is named where it is read as a run's (run_dir, export)
  value = recorded.get("do_lower_case") if isinstance(recorded, dict) else None
  return value if isinstance(value, bool) else None


def describe(path):
  """A Described of a TF checkpoint (a prefix, or a directory that holds one), else None."""
  prefix = checkpoint_prefix(path)
  if prefix is None:
    return None
  directory = path if tf.io.gfile.isdir(path) else os.path.dirname(prefix)
  return Described(format=NAME, weights=prefix,
                   config_file=_beside(directory, CONFIG_FILE),
                   vocab_file=_beside(directory, VOCAB_FILE),
                   do_lower_case=_recorded_casing(directory))


# ---------------------------------------------------------------------------- checkpoints

Checkpoints = collections.namedtuple("Checkpoints", ["whole", "incomplete"])
Checkpoints.__doc__ = """What scan_checkpoints finds: whole, [(step, prefix)] ascending; incomplete,
[(step, prefix, what is missing)] ascending."""


def _checkpoint_files(directory, pattern):
  """{prefix name: what its files are} of the checkpoints in directory whose files `pattern`
  matches (its group "prefix", and "shard" and "shards" for a data file), for _missing_files."""
  files = collections.defaultdict(dict)
  try:
    names = tf.io.gfile.listdir(directory) if tf.io.gfile.isdir(directory) else []
  except tf.errors.OpError:
    names = []
  for name in names:
    match = pattern.match(name.rstrip("/"))
    if match:
      found = files[match.group("prefix")]
      if match.group("shards") is None:
        found["index"] = tf.io.gfile.stat(os.path.join(directory, name)).length > 0
      else:
        found.setdefault(int(match.group("shards")), set()).add(int(match.group("shard")))
  return files


def scan_checkpoints(directory):
  """The model.ckpt-<step> checkpoints of `directory`, found by listing it: whole (a non-empty
  .index and every data shard it names, .data-<i>-of-<n>) or incomplete (a copy or a save cut
  short: what is missing)."""
  whole, incomplete = [], []
  files = _checkpoint_files(directory, _CHECKPOINT_FILE)
  for step, name in sorted((int(name.rsplit("-", 1)[1]), name) for name in files):
    prefix = os.path.join(directory, name)
    # Every file there, then as long as the index says (a power loss cuts a .data file short).
    missing = _missing_files(files[name]) or integrity.bundle_damage(prefix)
    if missing:
      incomplete.append((step, prefix, missing))
    else:
      whole.append((step, prefix))
  return Checkpoints(whole, incomplete)


def missing_checkpoint_files(prefix):
  """What the checkpoint `prefix` lacks of its files (a phrase, as scan_checkpoints says it), or
  None when it is whole."""
  directory, name = os.path.split(prefix)
  pattern = re.compile(rf"^(?P<prefix>{re.escape(name)})"
                       rf"\.(?:index|data-(?P<shard>\d+)-of-(?P<shards>\d+))$")
  return _missing_files(_checkpoint_files(directory or ".", pattern).get(name, {}))


def _missing_files(found):
  """What a checkpoint's files (scan_checkpoints' record of them) lack, as a phrase, or None."""
  shards = {n: done for n, done in found.items() if isinstance(n, int)}
  if "index" not in found:
    return "no .index file"
  if not found["index"]:
    return "an empty .index file"
  if not shards:
    return "no .data file"
  if len(shards) > 1:
    return f"data shards of {len(shards)} different saves"
  (n, done), = shards.items()
  absent = sorted(set(range(n)) - done)
  if absent:
    return f"{len(absent)} of its {n} .data shards missing (.data-{absent[0]:05d}-of-{n:05d} ...)"
  return None


_warned = set()


def _warn_once(message):
  if message not in _warned:
    _warned.add(message)
    logging.warning(message)


def _incomplete_warning(step, prefix, missing, whole):
  """What latest_checkpoint says of an incomplete or cut checkpoint (`whole`: scan_checkpoints'):
  one before the newest whole one is left alone; a newer one is skipped, and a training run sets
  it aside (bert_tf.training.recovery)."""
  if whole and whole[-1][0] > step:
    return f"{prefix} is incomplete ({missing}): left as it is, not used"
  going_on = (f"going on from {whole[-1][1]}, the newest whole checkpoint before it" if whole
              else "no whole checkpoint before it: a training run starts afresh")
  return (f"{prefix} is damaged ({missing}): skipped, {going_on} (a training run renames its "
          f"files aside, as {os.path.basename(prefix)}.damaged-<n>.*)")


def state_file_checkpoint(directory):
  """The checkpoint the `checkpoint` state file names (a path), or None (no file, or none it can
  be read to name). Read here, not by TensorFlow, which logs two lines for a damaged file."""
  try:
    with tf.io.gfile.GFile(os.path.join(directory, "checkpoint"), "rb") as f:
      text = f.read().decode("utf-8", "replace")
  except tf.errors.OpError:
    return None
  named = re.search(r'^\s*model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
  if not named or not named.group(1):
    return None
  path = named.group(1).encode("latin-1", "backslashreplace").decode("unicode_escape")
  return path if os.path.isabs(path) or "://" in path else os.path.join(directory, path)


def write_state_file(directory, names):
  """Writes directory's `checkpoint` state file (atomically) naming the checkpoints `names` (file
  names, the newest last) as TensorFlow's does: tf.train.get_checkpoint_state reads it, and a
  tf.train.CheckpointManager keeps the checkpoints it names without a timestamp."""
  quoted = [json.dumps(name) for name in names]  # a text proto's strings
  write_text_atomically(os.path.join(directory, "checkpoint"), "".join(
      [f"model_checkpoint_path: {quoted[-1]}\n"] +
      [f"all_model_checkpoint_paths: {name}\n" for name in quoted]))


def _same_path(a, b):
  if "://" in a or "://" in b:
    return a.rstrip("/") == b.rstrip("/")
  return os.path.realpath(a) == os.path.realpath(b)


def latest_checkpoint(directory):
  """The prefix of the newest whole model.ckpt-<step> in `directory`, found by listing it, or
  None. When the `checkpoint` state file is missing or names another checkpoint (a copy moved
  without it, or a stale one), a warning says which is used; an incomplete checkpoint is named in
  a warning and left alone. Without any model.ckpt-<step>, the checkpoint the state file names
  (a checkpoint of another name), when it is whole."""
  found = scan_checkpoints(directory)
  named = state_file_checkpoint(directory)
  for step, prefix, missing in found.incomplete:
    _warn_once(_incomplete_warning(step, prefix, missing, found.whole))
  if not found.whole:
    if named and not found.incomplete and missing_checkpoint_files(named) is None:
      return named
    return None
  newest = found.whole[-1][1]
  if named is None or not any(_same_path(named, prefix) for prefix in
                              [newest] + [prefix for _, prefix, _ in found.incomplete]):
    said = ("is missing" if not tf.io.gfile.exists(os.path.join(directory, "checkpoint")) else
            "names no checkpoint (it cannot be read)" if named is None else
            f"names {os.path.basename(named)}, which is not there" if not
            tf.io.gfile.exists(named + ".index") else
            f"names {os.path.basename(named)}, not the newest")
    _warn_once(f"{directory}: its `checkpoint` file {said}: using the newest whole checkpoint "
               f"found there, {newest}")
  return newest

"""TFRecord files: their writer and reader, and pretraining's schemas (the original's
name_to_features).

Every script that writes or reads records goes through here (a fine-tuning task states its own
schema in its module of bert_tf.tasks): write_records(path, feature_dicts) writes a record file
atomically; records_input_fn(...) reads record files as the input_fn of bert_tf.training.loop (for
training it shards by file across input pipelines, or by record when there are fewer files,
repeats, shuffles the files and interleaves them, shuffles records (seeded), batches per replica
and prefetches).
"""
import collections
import contextlib
import re

from bert_tf import errors
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model import objectives


# TensorFlow loads on first use: create_pretraining_data reads its input file list through here.
tf = fileio.tf


# A pretraining record (create_pretraining_data.py), in its features' order: name -> (length,
# kind), length "seq" (max_seq_length) or "predictions" (max_predictions_per_seq) or 1. The names
# are the objective's (bert_tf.model.objectives), which the model and the loss read.
PRETRAINING_RECORD = {
    "input_ids": ("seq", "int64"), "input_mask": ("seq", "int64"),
    "segment_ids": ("seq", "int64"),
    objectives.MASKED_LM_POSITIONS: ("predictions", "int64"),
    objectives.MASKED_LM_IDS: ("predictions", "int64"),
    objectives.MASKED_LM_WEIGHTS: ("predictions", "float32"),
    objectives.NEXT_SENTENCE_LABELS: (1, "int64"),
}


def pretraining_record(masked=True):
  """The features of a pretraining record, in order; masked=False: create_pretraining_data.py
  --unmasked's (no masked-LM features: run_pretraining.py --dynamic_masking draws them)."""
  return {name: spec for name, spec in PRETRAINING_RECORD.items()
          if masked or name not in objectives.MASKED_LM_FEATURES}


def pretraining_features(max_seq_length, max_predictions_per_seq, masked=True):
  """Records of create_pretraining_data.py, read by run_pretraining.py: the tf.io specs of
  PRETRAINING_RECORD; masked=False: without the masked LM's (--unmasked)."""
  lengths = {"seq": max_seq_length, "predictions": max_predictions_per_seq}
  return {name: tf.io.FixedLenFeature([lengths.get(length, length)], getattr(tf, kind))
          for name, (length, kind) in pretraining_record(masked).items()}


def unmasked_pretraining_features(max_seq_length):
  """Records of create_pretraining_data.py --unmasked (the text itself, no masked_lm_*), read by
  run_pretraining.py --dynamic_masking (bert_tf.data.dynamic_masking)."""
  return pretraining_features(max_seq_length, 1, masked=False)


def to_example(features):
  """An OrderedDict name -> list of int or float values, as a tf.train.Example."""
  feature = collections.OrderedDict()
  for name, values in features.items():
    values = list(values) if hasattr(values, "__iter__") else [values]
    if values and isinstance(values[0], float):
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    else:
      feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
  return tf.train.Example(features=tf.train.Features(feature=feature))


def serialize(features):
  # deterministic=True sorts the feature map, so the same records give the same bytes every run.
  return to_example(features).SerializeToString(deterministic=True)


class RecordWriter:
  """`with RecordWriter(path) as writer: writer.write(feature_dict)`: a TFRecord file that appears
  whole, when the block ends without an error, or not at all. `count` records were written."""

  def __init__(self, path):
    self.path = path
    self.count = 0

  def __enter__(self):
    self._atomic = fileio.atomic_output(self.path)
    self._writer = tf.io.TFRecordWriter(self._atomic.__enter__())
    return self

  def write(self, features):
    """Writes a feature dict (name -> int or float values, see to_example) as one record."""
    self._writer.write(serialize(features))
    self.count += 1

  def __exit__(self, *exc):
    self._writer.close()
    return self._atomic.__exit__(*exc)


def write_records(path, feature_dicts):
  """Writes each feature dict as one record of a TFRecord file that appears whole or not at all;
  returns how many were written."""
  with RecordWriter(path) as writer:
    for features in feature_dicts:
      writer.write(features)
  return writer.count


def parse_fn(name_to_features, source="records"):
  """A tf.data map function: serialized Example -> dict of tensors, int64 cast to int32.

  TPUs support only int32, as the original noted, and int32 is what the models take everywhere.
  """

  def parse(record):
    example = tf.io.parse_single_example(record, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t for name, t in example.items()}

  return parse


def _mismatch(example, name_to_features):
  """What of a tf.train.Example disagrees with the schema (a phrase), or None."""
  for name, spec in name_to_features.items():
    if name not in example.features.feature:
      return f"records have no feature {name!r}; expected {sorted(name_to_features)}"
    feature = example.features.feature[name]
    length = len(feature.int64_list.value) + len(feature.float_list.value)
    expected = spec.shape[0] if spec.shape else 1
    if length != expected:
      return (f"feature {name!r} has length {length} but the flags expect {expected} (check "
              f"--max_seq_length / --max_predictions_per_seq)")
  return None


def check_record_shapes(path, name_to_features):
  """Reads the first record of `path` and raises a clear error if its features disagree with the
  schema; returns False when the file holds no record. (A later record that disagrees fails the
  input pipeline, where naming_bad_records finds it.)"""
  try:
    first = list(tf.data.TFRecordDataset(path).take(1))
  except tf.errors.DataLossError as e:
    raise BertTfError(f"{path}: not a TFRecord file, or truncated or corrupt "
                      f"({errors.op_message(e.message)})") from None
  for raw in first:
    mismatch = _mismatch(tf.train.Example.FromString(raw.numpy()), name_to_features)
    if mismatch:
      raise BertTfError(f"{path}: {mismatch}")
  return bool(first)


# Every record file an input_fn of records_input_fn reads, with its schema: where
# naming_bad_records looks for a record the pipeline could not parse.
_SOURCES = {}


def find_bad_record(path, name_to_features=None):
  """(1-based number, what is wrong) of the first record of `path` that is corrupt or truncated
  (the file's bytes), or whose features disagree with the schema (when given); None if none is."""
  records = iter(tf.data.TFRecordDataset(path))
  number = 0
  while True:
    number += 1
    try:
      raw = next(records)
    except StopIteration:
      return None
    except tf.errors.DataLossError as e:
      at = re.search(r"record at (\d+)", e.message or "")
      return number, (f"corrupt or truncated at byte {at.group(1)}" if at else
                      f"corrupt or truncated ({errors.op_message(e.message)})")
    if name_to_features is None:
      continue
    try:
      mismatch = _mismatch(tf.train.Example.FromString(raw.numpy()), name_to_features)
    except Exception:  # pylint: disable=broad-except  (protobuf's DecodeError)
      mismatch = "not a tf.train.Example"
    if mismatch:
      return number, mismatch


@contextlib.contextmanager
def naming_bad_records():
  """Around the steps that read records: an input pipeline that fails on a record (one of other
  lengths than the first's, which check_record_shapes read, or the bytes of a corrupt or
  truncated file) raises a BertTfError naming the file and the record, found by reading the files
  it read, instead of TensorFlow's InvalidArgumentError or DataLossError."""
  try:
    yield
  except tf.errors.DataLossError as e:
    for path in list(_SOURCES):
      found = find_bad_record(path)
      if found:
        raise BertTfError(f"{path}: record {found[0]} is {found[1]}: the file is damaged; "
                          f"expected whole TFRecord files (make it again, or leave it out)") \
            from None
    raise BertTfError(f"a record file is corrupt or truncated ({errors.op_message(e.message)}); "
                      f"it is one of {', '.join(_SOURCES) or 'the input files'}") from None
  except tf.errors.InvalidArgumentError as e:
    if "parse serialized Example" not in (e.message or "") and "ParseSingleExample" not in (
        e.message or ""):
      raise
    for path, name_to_features in list(_SOURCES.items()):
      found = find_bad_record(path, name_to_features)
      if found:
        raise BertTfError(f"{path}: record {found[0]}: {found[1]}; the records before it have "
                          f"the expected lengths (every record must)") from None
    raise


def per_replica_batch_size(input_context, global_batch_size, gradient_accumulation_steps=1):
  """Examples per replica (per micro-batch, with gradient_accumulation_steps), for a global batch
  of `global_batch_size`."""
  parts = input_context.num_replicas_in_sync * gradient_accumulation_steps
  if global_batch_size % parts:
    raise BertTfError(f"--train_batch_size: {global_batch_size} is not divisible by "
                      f"{input_context.num_replicas_in_sync} replica(s) x "
                      f"{gradient_accumulation_steps} accumulation step(s)")
  return global_batch_size // parts


def records_input_fn(input_files, name_to_features, batch_size, is_training, seed=0,
                     map_fn=None, drop_remainder=None,
                     shuffle_buffer_size=100, cycle_length=4, repeat=None, numbered_map_fn=None,
                     batch_map_fn=None):
  """An input_fn over TFRecord files; `batch_size` is the global batch per optimizer step, and
each input pipeline's batches are its replica's share of it (bert_tf.training.loop splits them
into the micro-batches of --gradient_accumulation_steps, so that what a resumed run's checkpointed
input position holds does not depend on it).

  map_fn(features) maps each record; numbered_map_fn(number, features) too (first), where number
  (int64) tells the records of the run apart: its position in the stream of records read (the
  repeats counted on), the same across input pipelines that share one stream, unique across those
  that read files of their own. batch_map_fn maps each batch.
  """
  input_files = list(input_files)
  for path in input_files:
    _SOURCES[path] = name_to_features
  drop_remainder = is_training if drop_remainder is None else drop_remainder
  repeat = is_training if repeat is None else repeat

  def input_fn(input_context=None):
    input_context = input_context or tf.distribute.InputContext()
    replica_batch = per_replica_batch_size(input_context, batch_size)
    pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
    # Number the records before a shard of one shared stream, after a shard by file.
    by_file = is_training and len(input_files) >= pipelines

    def number(d, stride=1, offset=0):
      """(number, record) pairs if numbered_map_fn wants them."""
      if numbered_map_fn is None:
        return d
      return d.enumerate().map(lambda i, record: (i * stride + offset, record))

    if is_training:
      files = tf.data.Dataset.from_tensor_slices(tf.constant(input_files))
      if by_file:
        files = files.shard(pipelines, pipeline_id)
      if repeat:
        files = files.repeat()
      files = files.shuffle(max(len(input_files), 1), seed=seed)
      d = files.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length,
                                                                     len(input_files)),
                           num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
      d = d.shuffle(shuffle_buffer_size, seed=seed)
      d = number(d, pipelines if by_file else 1, pipeline_id if by_file else 0)
      if not by_file:
        # Every pipeline reads the same shuffled stream and keeps its share, so N replicas see
        # the same global batches as one device.
        d = d.shard(pipelines, pipeline_id)
    else:
      d = tf.data.TFRecordDataset(input_files)
      d = number(d.repeat() if repeat else d)
      if pipelines > 1:
        d = d.shard(pipelines, pipeline_id)
    parse = parse_fn(name_to_features)
    if numbered_map_fn is None:
      d = d.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
      d = d.map(lambda i, record: numbered_map_fn(i, parse(record)),
                num_parallel_calls=tf.data.AUTOTUNE)
    if map_fn is not None:
      d = d.map(map_fn, num_parallel_calls=tf.data.AUTOTUNE)
    d = d.batch(replica_batch, drop_remainder=drop_remainder)
    if batch_map_fn is not None:
      d = d.map(batch_map_fn, num_parallel_calls=tf.data.AUTOTUNE)
    return d.prefetch(tf.data.AUTOTUNE)

  return input_fn


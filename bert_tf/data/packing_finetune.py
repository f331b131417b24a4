"""Packed fine-tuning (--pack_sequences of run_classifier.py, run_ner.py and run_swag.py): several
examples per row, placed as run_pretraining.py --pack_sequences places its instances
(bert_tf.data.packing's first fit decreasing over windows of packing.WINDOW examples), so that steps are
spent on text rather than padding.

An example is one sequence (GLUE, NER) or `num_sequences` of them (SWAG's four choices: they go
into one row together, since the example's loss is a softmax over them). A row is as wide as one
of the task's records (num_sequences x max_seq_length tokens) and every sequence in it keeps its
own tokens, segments, positions (restarting at 0) and attention (no token attends outside its
sequence). The task's records are read unchanged; a packed row holds
  input_ids, input_mask, segment_ids [W]   the examples' tokens one after the other (a prefix)
  position_ids, instance_ids [W]           positions and the block-diagonal attention
                                           (bert_tf.model.modeling.attention_mask_adder)
  the records' other per-token features    [W] (NER's label_ids, label_weights)
  cls_positions [K] ([K, num_sequences])   each example's [CLS] position (each sequence's)
  the records' per-example features        [K] (label_ids, is_real_example), in the example's slot
  example_weights [K]                      1.0 where a slot holds an example, else 0.0
  example_index [K]                        evaluation: the example's place in its file, -1 empty
  loss_normalizer []                       training: the step's total weight per row (mean_loss)
K is --max_instances_per_row (default max_seq_length / 8). Shapes are static.

Training packs the shuffled training records window by window, shuffles the rows (seeded) and
takes --train_batch_size rows per optimizer step: every input pipeline packs the same stream and
keeps its replicas' rows, so that the loss is normalized over the whole step (mean_loss:
one packed step computes the loss of the same examples as one unpacked batch). Evaluation and
prediction pack the records in file order, and Layout.unpack turns the packed predict batches
back into those the unpacked path yields (the records' features and each example's outputs, in
input order): the tasks score them and write their files unchanged.
"""
import numpy as np
import tensorflow as tf

from bert_tf.data import packing
from bert_tf.data import records
from bert_tf.errors import BertTfError

WINDOW = packing.WINDOW
# What a packed row adds to the encoder's inputs (bert_tf.model.heads reads them).
PACKED_INPUTS = ("position_ids", "instance_ids")
# 1.0 where a row's slot holds an example: what a packed loss is a mean over (tasks read it).
EXAMPLE_WEIGHTS = "example_weights"


class Layout:
  """How a task's records pack (schema: its name_to_features; num_sequences per example)."""

  def __init__(self, schema, max_seq_length, num_sequences=1, max_instances=None):
    self.schema, self.num_sequences = schema, num_sequences
    self.seq_length, self.width = max_seq_length, num_sequences * max_seq_length
    self.max_instances = max_instances or packing.default_max_instances(
        max_seq_length, packing.FINETUNING_TOKENS_PER_INSTANCE)
    # An example holds at least [CLS] [SEP] per sequence; also K < width tells the per-example
    # outputs [B, K, ...] from the per-token ones [B, width, ...] (unpack).
    if not 1 <= self.max_instances <= max_seq_length // 2:
      raise BertTfError(f"--max_instances_per_row: expected 1 to {max_seq_length // 2} "
                        f"(--max_seq_length / 2), got {self.max_instances}")
    shapes = {name: spec.shape.as_list() if hasattr(spec.shape, "as_list") else list(spec.shape)
              for name, spec in schema.items()}
    self.token_features = [n for n, s in shapes.items() if s == [self.width]]
    self.example_features = [n for n, s in shapes.items() if s == []]
    other = sorted(set(schema) - set(self.token_features) - set(self.example_features))
    if other:
      raise ValueError(f"records with features {other} cannot be packed")
    self.row_features = set(self.token_features + self.example_features + list(PACKED_INPUTS) +
                            ["cls_positions", EXAMPLE_WEIGHTS, "example_index"])

  # -------------------------------------------------------------------------- packing

  def pack(self, features):
    """A window of records (dict of [N, ...] tensors; optional int example_index [N]) -> packed
    rows (dict of [R, ...] tensors, see the module docstring)."""
    c, s, k = self.num_sequences, self.seq_length, self.max_instances
    mask = tf.reshape(features["input_mask"], [-1, c, s])
    lengths = tf.reduce_sum(mask, axis=2)  # [N, C]
    row, offset, slot, _ = tf.unstack(packing.first_fit_decreasing(
        tf.reduce_sum(lengths, axis=1), self.width, k), axis=1)
    num_rows = tf.reduce_max(row) + 1
    starts = offset[:, tf.newaxis] + tf.cumsum(lengths, axis=1, exclusive=True)  # [N, C]
    positions = tf.broadcast_to(tf.range(s), tf.shape(mask))  # [N, C, S]
    real = positions < lengths[:, :, tf.newaxis]
    token_index = packing.row_grid(row, starts[:, :, tf.newaxis] + positions)
    example_index = tf.stack([row, slot], axis=1)
    every = tf.ones_like(row, tf.bool)

    def tokens(values):
      values = (tf.reshape(values, [-1, c, s]) if values.shape.rank == 2 else
                tf.broadcast_to(values, tf.shape(mask)))
      return packing.scatter_rows(token_index, real, values, num_rows, self.width)

    def per_example(values):
      return packing.scatter_rows(example_index, every, values, num_rows, k)

    rows = {name: tokens(features[name]) for name in self.token_features}
    rows["position_ids"] = tokens(positions)
    rows["instance_ids"] = tokens(slot[:, tf.newaxis, tf.newaxis] * c +
                                  tf.range(c)[tf.newaxis, :, tf.newaxis] + 1)
    for name in self.example_features:
      rows[name] = per_example(features[name])
    rows["cls_positions"] = per_example(starts if c > 1 else starts[:, 0])
    rows[EXAMPLE_WEIGHTS] = per_example(tf.ones_like(offset, tf.float32))
    if "example_index" in features:  # -1 in the empty slots
      rows["example_index"] = per_example(tf.cast(features["example_index"], tf.int32) + 1) - 1
    return rows

  def _window_rows(self, windows):
    return windows.map(self.pack, num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True).unbatch()

  def _ordered_rows(self, path):
    """The rows of a record file packed in file order, each slot numbered (example_index)."""

    def numbered(i, features):
      return dict(features, example_index=tf.cast(i, tf.int32))

    windows = records.records_input_fn([path], self.schema, WINDOW, is_training=False,
                                       numbered_map_fn=numbered)(tf.distribute.InputContext())
    return self._window_rows(windows)

  def count_rows(self, path):
    """The rows the records of `path` pack into (in file order): an epoch of packed training.

    Each window's examples are placed as pack() places them (packing.first_fit_rows): packing
    them in a pipeline only to count its rows would trace and scatter every feature.
    """
    def example_lengths(features):
      mask = tf.reshape(features["input_mask"], [-1, self.num_sequences, self.seq_length])
      return tf.reduce_sum(mask, axis=[1, 2])

    windows = records.records_input_fn([path], self.schema, WINDOW, is_training=False,
                                       batch_map_fn=example_lengths)(tf.distribute.InputContext())
    return sum(packing.first_fit_rows(lengths, self.width, self.max_instances)
               for lengths in windows.as_numpy_iterator())

  # -------------------------------------------------------------------------- input_fns

  def train_input_fn(self, path, batch_size, seed, shuffle_buffer_size=100,
                     loss_weights=EXAMPLE_WEIGHTS):
    """A bert_tf.training.loop train input_fn of packed rows; batch_size counts rows per optimizer
    step, of which each replica gets its share. loss_weights: the row feature whose sum over the
    step normalizes the loss (mean_loss)."""

    def input_fn(input_context=None):
      context = input_context or tf.distribute.InputContext()
      share_rows = records.per_replica_batch_size(context, batch_size)
      replicas = context.num_replicas_in_sync
      per_pipeline = replicas // context.num_input_pipelines
      first = context.input_pipeline_id * per_pipeline
      windows = records.records_input_fn(
          [path], self.schema, WINDOW, is_training=True, seed=seed,
          shuffle_buffer_size=shuffle_buffer_size)(tf.distribute.InputContext())
      d = self._window_rows(windows).shuffle(WINDOW, seed=seed)
      d = d.batch(batch_size, drop_remainder=True)  # the rows of one optimizer step

      def share(rows):
        """This pipeline's replicas' shares of the step, each row knowing the step's loss weight
        per row (mean_loss)."""
        normalizer = tf.reduce_sum(tf.cast(rows[loss_weights], tf.float32)) / batch_size

        def mine(t):
          t = tf.reshape(t, tf.concat([[replicas, share_rows], tf.shape(t)[1:]], 0))
          return t[first:first + per_pipeline]

        shared = {name: mine(t) for name, t in rows.items()}
        shared["loss_normalizer"] = tf.fill([per_pipeline, share_rows], normalizer)
        return shared

      d = d.map(share, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
      return d.prefetch(tf.data.AUTOTUNE)

    return input_fn

  def predict_input_fn(self, path, batch_size):
    """Packed rows of a split's records in file order, batch_size rows per global batch."""

    def input_fn(input_context=None):
      context = input_context or tf.distribute.InputContext()
      rows = records.per_replica_batch_size(context, batch_size)
      d = self._ordered_rows(path)
      if context.num_input_pipelines > 1:
        d = d.shard(context.num_input_pipelines, context.input_pipeline_id)
      return d.batch(rows).prefetch(tf.data.AUTOTUNE)

    return input_fn

  # -------------------------------------------------------------------------- unpacking

  def unpack(self, packed_batches, path, batch_size):
    """Predict batches of packed rows -> the batches an unpacked prediction of `path` yields
    (batch_size records each, in file order: the records' features and each example's model
    outputs; per-token outputs at the example's own positions, zero on its padding)."""
    reader = records.records_input_fn([path], self.schema, batch_size, is_training=False)
    done, start = {}, 0
    packed = iter(packed_batches)
    for features in reader(tf.distribute.InputContext()).as_numpy_iterator():
      end = start + len(features["input_ids"])
      for i in range(start, end):
        while i not in done:
          batch = next(packed, None)
          if batch is None:
            raise BertTfError(f"{path}: the packed predictions hold no example {i}")
          self._collect(batch, done)
      names = sorted(done[start])
      outputs = {name: np.stack([done[i][name] for i in range(start, end)]) for name in names}
      for i in range(start, end):
        del done[i]
      yield dict(features, **outputs)
      start = end

  def _collect(self, batch, done):
    """Each example's outputs in a packed predict batch, into done[example index]."""
    outputs = {name: value for name, value in batch.items() if name not in self.row_features}
    index, cls, instance_ids = batch["example_index"], batch["cls_positions"], batch["instance_ids"]
    c, s = self.num_sequences, self.seq_length
    for b, k in zip(*np.nonzero(index >= 0)):
      example = {}
      for name, value in outputs.items():
        if value.shape[1] == self.max_instances:
          example[name] = value[b, k]
          continue
        if value.shape[1] != self.width:
          raise ValueError(f"output {name} {value.shape}: neither per example nor per token")
        tokens = np.zeros((self.width,) + value.shape[2:], value.dtype)
        starts = np.reshape(cls[b, k], [c])
        for j in range(c):
          length = int(np.sum(instance_ids[b] == k * c + j + 1))
          tokens[j * s:j * s + length] = value[b, starts[j]:starts[j] + length]
        example[name] = tokens
      done[int(index[b, k])] = example


# ---------------------------------------------------------------------------- losses, metrics


def example_weights(features):
  """The weight of each example of a batch: None unpacked (all real), example_weights [B, K]
  packed."""
  return features.get(EXAMPLE_WEIGHTS)


def mean_loss(features, losses, weights=None):
  """A micro-batch's loss from per-element losses (per example, or per word with weights, as
  NER's label_weights): unpacked, their (weighted) mean over the micro-batch, as the original;
  packed, their weighted sum over the step's total weight per row (loss_normalizer) times the
  micro-batch's rows, so that an optimizer step's loss is the mean over all of its examples
  (words), however they are spread over rows, micro-batches and replicas (the loop divides each
  micro-batch's loss by their number)."""
  losses = tf.cast(losses, tf.float32)
  if weights is None:
    weights = example_weights(features)
  if weights is None:
    return tf.reduce_mean(losses)
  total = tf.reduce_sum(losses * tf.cast(weights, tf.float32))
  normalizer = features.get("loss_normalizer")
  if normalizer is None:
    return total / tf.maximum(tf.reduce_sum(tf.cast(weights, tf.float32)), 1.0)
  rows = tf.cast(tf.shape(normalizer)[0], tf.float32)
  return tf.math.divide_no_nan(total, tf.reshape(normalizer, [-1])[0] * rows)


def row_statistics(features):
  """Per packed row: examples and real tokens, as training metrics {name: (values, None)}
  (bert_tf.training.scalars.TrainLog turns X_per_row into X_per_second: examples_per_second)."""
  return {
      "examples_per_row": (tf.reduce_sum(features[EXAMPLE_WEIGHTS], axis=-1), None),
      "real_tokens_per_row": (tf.reduce_sum(tf.cast(features["input_mask"], tf.float32),
                                            axis=-1), None),
  }


def task_layout(options, task, is_training):
  """The Layout of a fine-tuning task's records (task.schema, task.num_sequences) with
  --pack_sequences (options: the run's bert_tf.drivers.finetune_options.FinetuneOptions, which checks
  the packing flags' combinations), else None."""
  if not options.pack_sequences:
    return None
  return Layout(task.schema(is_training), options.max_seq_length, task.num_sequences,
                options.max_instances_per_row)


def with_row_statistics(metric_fn):
  """A task's train metric_fn plus row_statistics (packed rows)."""

  def packed_metric_fn(features, outputs):
    results = dict(metric_fn(features, outputs)) if metric_fn else {}
    results.update(row_statistics(features))
    return results

  return packed_metric_fn

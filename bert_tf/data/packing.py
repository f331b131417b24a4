"""Packed pretraining input (run_pretraining.py --pack_sequences): several instances of the
original pretraining records per row of max_seq_length, packed at input time.

The records are read unchanged (records.pretraining_features). Windows of WINDOW consecutive
instances (after the usual file and record shuffles) are packed by first-fit decreasing: each
instance, longest first, goes into the first row with room for its tokens, for one more instance
(max_instances) and for its masked-LM predictions (max_predictions); else it starts a new row.
Rows are then shuffled (seeded) and batched. Every step is a tf.data transformation without
state outside the iterator, so the packing is the same for the same seed and a checkpointed
iterator resumes exactly.

A packed row holds, besides input_ids, input_mask and segment_ids (each instance's own):
  position_ids [S]           positions restarting at 0 for every instance
  instance_ids [S]           1, 2, ... per instance, 0 on padding: attention stays inside an
                             instance (bert_tf.model.modeling.attention_mask_adder)
  masked_lm_positions/ids/weights [max_predictions]   every instance's real predictions, its
                             positions shifted by the instance's offset in the row
  next_sentence_positions/labels/weights [max_instances]   each instance's [CLS] position, its
                             label, and 1.0 where a slot holds an instance
Shapes are static: rows of max_seq_length, max_instances and max_predictions slots.
"""
import math

import numpy as np
import tensorflow as tf

from bert_tf.data import dynamic_masking
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.model import objectives

WINDOW = 1024  # instances packed together (and rows shuffled together)
# The original's --masked_lm_prob (--dynamic_masking's own): a full row of short instances holds about this share of
# predictions, plus rounding (each instance's count is rounded, and at least one).
MASKED_LM_PROB = 0.15


# A row's instance slots by default, per job: one per this many of the row's tokens
# (default_max_instances; run_pretraining.py's and the fine-tuning scripts' --help say so).
PRETRAINING_TOKENS_PER_INSTANCE = 16
FINETUNING_TOKENS_PER_INSTANCE = 8


def default_max_instances(max_seq_length, tokens_per_instance):
  """--max_instances_per_row's default: a slot per tokens_per_instance tokens of a row, 2 at
  least."""
  return max(2, max_seq_length // tokens_per_instance)


def default_max_predictions(max_seq_length, max_predictions_per_seq, max_instances,
                            left_to_right=False, masked_lm_prob=MASKED_LM_PROB):
  if left_to_right:  # every next token of every instance
    return max_seq_length
  return max(max_predictions_per_seq, math.ceil(masked_lm_prob * max_seq_length)) + (
      max_instances // 2)


def row_limits(max_seq_length, objective, max_instances_per_row=None,
               max_predictions_per_row=None):
  """(max_instances, max_predictions) per row for --max_instances_per_row and
  --max_predictions_per_row (None: the defaults) under a bert_tf.model.objectives.Objective, checked."""
  seq, left_to_right, masking = max_seq_length, objective.left_to_right, objective.masking
  max_instances = max_instances_per_row or default_max_instances(
      seq, PRETRAINING_TOKENS_PER_INSTANCE)
  if max_instances < 1:
    raise BertTfError(f"--max_instances_per_row: expected >= 1, got {max_instances}")
  max_predictions = max_predictions_per_row or default_max_predictions(
      seq, masking.max_predictions_per_seq, max_instances, left_to_right,
      masking.masked_lm_prob if masking.dynamic_masking else MASKED_LM_PROB)
  needed = seq - 1 if left_to_right else masking.max_predictions_per_seq
  if max_predictions < needed:
    raise BertTfError(f"--max_predictions_per_row: {max_predictions} is less than one instance "
                      f"can hold ({needed}: " + ("--max_seq_length - 1 with --left_to_right)"
                                                 if left_to_right else
                                                 "--max_predictions_per_seq)"))
  return max_instances, max_predictions


def first_fit_decreasing(lengths, seq_length, max_instances, predictions=None,
                         max_predictions=0):
  """int32 [W, 4] per instance: its row, token offset, slot and prediction offset in the row.

  Each instance, longest first, goes into the first row with room for its `lengths` tokens, one
  more instance and (optionally) its `predictions`; else it opens a new row. Also the placement
  of packed fine-tuning (bert_tf.data.packing_finetune), without predictions.
  """
  n = tf.shape(lengths)[0]
  if predictions is None:
    predictions = tf.zeros_like(lengths)
  order = tf.argsort(lengths, direction="DESCENDING", stable=True)
  rows_index = tf.range(n)

  def body(i, row_tokens, row_instances, row_predictions, num_rows, placed):
    item = order[i]
    length, count = lengths[item], predictions[item]
    fits = ((row_tokens + length <= seq_length) & (row_instances < max_instances) &
            (row_predictions + count <= max_predictions) & (rows_index < num_rows))
    row = tf.where(tf.reduce_any(fits), tf.argmax(tf.cast(fits, tf.int32), output_type=tf.int32),
                   num_rows)
    placed = placed.write(i, tf.stack([row, row_tokens[row], row_instances[row],
                                       row_predictions[row]]))
    one = tf.one_hot(row, n, dtype=tf.int32)
    return (i + 1, row_tokens + one * length, row_instances + one, row_predictions + one * count,
            tf.maximum(num_rows, row + 1), placed)

  zeros = tf.zeros([n], tf.int32)
  *_, placed = tf.while_loop(
      lambda i, *_: i < n, body,
      (0, zeros, zeros, zeros, 0, tf.TensorArray(tf.int32, size=n, element_shape=[4])))
  return tf.scatter_nd(order[:, tf.newaxis], placed.stack(), tf.stack([n, 4]))


def first_fit_rows(lengths, seq_length, max_instances):
  """How many rows first_fit_decreasing opens for `lengths` (numpy [N]; no predictions): the same
  placement, in numpy, for counting rows without building them."""
  room = np.zeros(len(lengths), np.int64)  # tokens left in each open row; -1 once it is full
  instances = np.zeros(len(lengths), np.int64)
  rows = 0
  for length in sorted(lengths.tolist(), reverse=True):  # equal lengths: any order places alike
    row = int(np.argmax(room[:rows] >= length)) if rows else 0
    if not rows or room[row] < length:  # no open row fits: a new one
      row, room[rows] = rows, seq_length
      rows += 1
    room[row] -= length
    instances[row] += 1
    if instances[row] == max_instances:
      room[row] = -1
  return rows


def scatter_rows(indices, real, values, num_rows, width):
  """[num_rows, width, ...] rows holding `values` [*real.shape, ...] at (row, column) `indices`
  [*real.shape, 2] where `real`, zeros elsewhere."""
  shape = tf.concat([tf.stack([num_rows, width]), tf.shape(values)[real.shape.rank:]], axis=0)
  return tf.scatter_nd(tf.boolean_mask(indices, real), tf.boolean_mask(values, real), shape)


def row_grid(row, column):
  """(row, column) indices [W, ..., 2] of entries at `column` [W, ...] of each instance's row
  [W]."""
  rows = tf.reshape(row, tf.concat([tf.shape(row), tf.ones([column.shape.rank - 1], tf.int32)],
                                   axis=0))
  return tf.stack([tf.broadcast_to(rows, tf.shape(column)), column], axis=-1)


def pack_window(features, max_instances, max_predictions):
  """A window of pretraining instances (dict of [W, ...] tensors, input_mask a prefix of ones)
  -> packed rows (dict of [R, ...] tensors, see the module docstring)."""
  input_mask = features["input_mask"]
  seq_length = input_mask.shape[1]
  lengths = tf.reduce_sum(input_mask, axis=1)
  real_predictions = features[objectives.MASKED_LM_WEIGHTS] > 0
  num_predictions = tf.reduce_sum(tf.cast(real_predictions, tf.int32), axis=1)
  placement = first_fit_decreasing(lengths, seq_length, max_instances, num_predictions,
                                   max_predictions)
  row, offset, slot, prediction_offset = tf.unstack(placement, axis=1)
  num_rows = tf.reduce_max(row) + 1

  def scatter(indices, real, values, width):
    return scatter_rows(indices, real, values, num_rows, width)

  positions = tf.broadcast_to(tf.range(seq_length)[tf.newaxis], tf.shape(input_mask))
  real_tokens = positions < lengths[:, tf.newaxis]
  token_index = row_grid(row, offset[:, tf.newaxis] + positions)
  rank = tf.cumsum(tf.cast(real_predictions, tf.int32), axis=1) - 1
  prediction_index = row_grid(row, prediction_offset[:, tf.newaxis] + rank)
  instance_index = tf.stack([row, slot], axis=1)
  all_instances = tf.ones_like(row, tf.bool)

  def tokens(values):
    return scatter(token_index, real_tokens, values, seq_length)

  def per_prediction(values):
    return scatter(prediction_index, real_predictions, values, max_predictions)

  def per_instance(values):
    return scatter(instance_index, all_instances, values, max_instances)

  return {
      "input_ids": tokens(features["input_ids"]),
      "input_mask": tokens(input_mask),
      "segment_ids": tokens(features["segment_ids"]),
      "position_ids": tokens(positions),
      "instance_ids": tokens(tf.broadcast_to(slot[:, tf.newaxis] + 1, tf.shape(input_mask))),
      objectives.MASKED_LM_POSITIONS: per_prediction(
          features[objectives.MASKED_LM_POSITIONS] + offset[:, tf.newaxis]),
      objectives.MASKED_LM_IDS: per_prediction(features[objectives.MASKED_LM_IDS]),
      objectives.MASKED_LM_WEIGHTS: per_prediction(features[objectives.MASKED_LM_WEIGHTS]),
      objectives.NEXT_SENTENCE_POSITIONS: per_instance(offset),
      objectives.NEXT_SENTENCE_LABELS: per_instance(
          features[objectives.NEXT_SENTENCE_LABELS][:, 0]),
      objectives.NEXT_SENTENCE_WEIGHTS: per_instance(tf.ones_like(offset, tf.float32)),
  }


def _eval_window(instances, per_batch, window):
  """The largest window of whole eval batches that divides `instances` and is <= window."""
  batches = instances // per_batch
  fitting = [d for d in range(1, batches + 1) if batches % d == 0 and d * per_batch <= window]
  return per_batch * max(fitting, default=1)


def input_fn(input_files, max_seq_length, max_predictions_per_seq, batch_size, is_training,
             max_instances, max_predictions, seed=0, map_fn=None,
             eval_steps=None, window=WINDOW, masking=None):
  """Packed rows as a bert_tf.training.loop input_fn; batch_size counts rows (per optimizer step).

  map_fn applies to each instance before packing (the left-to-right targets), as does the
  dynamic masking (a bert_tf.data.dynamic_masking.DynamicMasking, or None). Evaluation packs
  exactly the instances that eval_steps unpacked batches of batch_size would hold (the first ones
  of the files, in order), and ends there.
  """
  if not is_training and not eval_steps:
    raise BertTfError("--max_eval_steps: packed evaluation needs a number of batches")

  def schema(training):
    return dynamic_masking.records_arguments(masking, max_seq_length, max_predictions_per_seq,
                                             training, seed)

  def packed_input_fn(input_context=None):
    context = input_context or tf.distribute.InputContext()
    replicas = context.num_replicas_in_sync
    rows = records.per_replica_batch_size(context, batch_size)  # the replica's rows of a step
    if is_training:
      windows = records.records_input_fn(input_files, batch_size=window * replicas,
                                         is_training=True, seed=seed, map_fn=map_fn, repeat=True,
                                         **schema(True))(context)
    else:  # this pipeline's share of eval_steps global batches
      instances = eval_steps * batch_size // context.num_input_pipelines
      size = _eval_window(instances, rows, window)
      windows = records.records_input_fn(input_files, batch_size=size * replicas,
                                         is_training=False, map_fn=map_fn, repeat=True,
                                         drop_remainder=True, **schema(False))(context)
      windows = windows.take(instances // size)
    d = windows.map(lambda f: pack_window(f, max_instances, max_predictions),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).unbatch()
    if is_training:
      d = d.shuffle(window, seed=seed)
    d = d.batch(rows, drop_remainder=is_training)
    return d.prefetch(tf.data.AUTOTUNE)

  return packed_input_fn


def row_statistics(features):
  """Per row: instances and real (non-padding) tokens, as training metrics {name: (values,
  None)}; bert_tf.training.scalars.TrainLog turns each X_per_row into X_per_second."""
  return {
      "instances_per_row": (
          tf.reduce_sum(features[objectives.NEXT_SENTENCE_WEIGHTS], axis=-1), None),
      "real_tokens_per_row": (tf.reduce_sum(tf.cast(features["input_mask"], tf.float32),
                                            axis=-1), None),
  }

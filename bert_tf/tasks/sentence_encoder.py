"""Sentence embeddings: a BERT encoder's token vectors pooled into one vector per sequence, as
sentence-transformers' Pooling and Normalize modules compute them, and the bi-encoder losses that
train them (sentence-transformers' CosineSimilarityLoss, CoSENTLoss and
MultipleNegativesRankingLoss).

  pool(sequence [N, T, H], input_mask [N, T], pooling)       -> float32 [N, H]
  pool_packed(sequence [B, W, H], instance_ids [B, W], cls_positions [B, K, C], pooling)
                                                              -> float32 [B, K, C, H]
  SentenceEncoder(config, pooling, ...)                       a tf_keras.Model (below)
  pair_loss(loss, a, b, labels, weights, scale)               the training losses

Poolings: cls (the first token's hidden state, as sentence-transformers' "cls"; not BERT's
tanh pooler), mean (over the real tokens, [CLS] and [SEP] included), max (over the real tokens),
mean_sqrt_len (their sum over the square root of their number). Everything is float32 whatever
the encoder's compute precision, so that the losses and the vectors written are.
"""
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.model import heads
from bert_tf.model import modeling

POOLINGS = ("cls", "mean", "max", "mean_sqrt_len")
# cosine: (cos(a, b) - label)^2, label the score scaled to [0, 1]; cosent: CoSENT's ranking of the
# batch's pairs by their scores; mnrl: each anchor's positive against every other pair's positive
# of the batch (multiple negatives ranking, in-batch negatives).
LOSSES = ("cosine", "cosent", "mnrl")
# What the masked positions add before a max and what a pair that does not count adds to a
# logit: finite, so that no inf - inf makes a NaN, and far below anything real.
_FAR_BELOW = -1e9


def pool(sequence, input_mask, pooling):
  """The sequences' vectors, float32 [N, H], of token vectors [N, T, H] and input_mask [N, T]."""
  sequence = tf.cast(sequence, tf.float32)
  if pooling == "cls":
    return sequence[:, 0]
  mask = tf.expand_dims(tf.cast(input_mask, tf.float32), -1)  # [N, T, 1]
  if pooling == "max":
    return tf.reduce_max(sequence + (1.0 - mask) * _FAR_BELOW, axis=1)
  total = tf.reduce_sum(sequence * mask, axis=1)  # [N, H]
  count = tf.maximum(tf.reduce_sum(mask, axis=1), 1e-9)  # [N, 1]
  if pooling == "mean":
    return total / count
  if pooling == "mean_sqrt_len":
    return total / tf.sqrt(count)
  raise BertTfError(f"--pooling: {pooling!r} is not one of {', '.join(POOLINGS)}")


def pool_packed(sequence, instance_ids, cls_positions, pooling):
  """Each sequence's vector in packed rows (bert_tf.data.packing_finetune: a sequence's tokens
  carry instance id slot * C + j + 1, 0 on padding; cls_positions [B, K, C] where each begins):
  float32 [B, K, C, H], zeros in the empty slots."""
  sequence = tf.cast(sequence, tf.float32)
  shape = tf.shape(cls_positions)
  batch, width, hidden = tf.shape(sequence)[0], tf.shape(sequence)[1], sequence.shape[-1]
  slots = cls_positions.shape[1] * cls_positions.shape[2]
  out_shape = tf.concat([shape, [hidden]], axis=0)
  if pooling == "cls":
    return tf.reshape(modeling.gather_positions(sequence, tf.reshape(cls_positions, [batch, -1])),
                      out_shape)
  # One segment per (row, instance id): id 0 (padding) gets its own, dropped below.
  ids = tf.cast(instance_ids, tf.int32) + tf.range(batch)[:, tf.newaxis] * (slots + 1)  # [B, W]
  flat_ids = tf.reshape(ids, [-1])
  flat = tf.reshape(sequence, [batch * width, hidden])
  segments = batch * (slots + 1)
  count = tf.math.unsorted_segment_sum(tf.ones_like(flat_ids, tf.float32), flat_ids, segments)
  count = tf.reshape(count, [batch, slots + 1, 1])[:, 1:]  # [B, K*C, 1]
  if pooling == "max":
    pooled = tf.math.unsorted_segment_max(flat, flat_ids, segments)
    pooled = tf.where(count > 0, tf.reshape(pooled, [batch, slots + 1, hidden])[:, 1:], 0.0)
  else:
    total = tf.reshape(tf.math.unsorted_segment_sum(flat, flat_ids, segments),
                       [batch, slots + 1, hidden])[:, 1:]
    if pooling == "mean":
      pooled = total / tf.maximum(count, 1e-9)
    elif pooling == "mean_sqrt_len":
      pooled = total / tf.sqrt(tf.maximum(count, 1e-9))
    else:
      raise BertTfError(f"--pooling: {pooling!r} is not one of {', '.join(POOLINGS)}")
  return tf.reshape(pooled, out_shape)


def normalized(vectors):
  """Unit-length vectors along the last axis (sentence-transformers' Normalize)."""
  return tf.math.l2_normalize(vectors, axis=-1)


class SentenceEncoder(tf_keras.Model):
  """`.encoder` (a BertModel under the original's variable names) and the pooling of one of its
  layers (default the last): its checkpoints are the encoder's alone.

  inputs {input_ids, input_mask, segment_ids} [N, T] -> {"embeddings": float32 [N, H]};
  num_sequences C > 1 (a bi-encoder's pair, as the records hold it: [B, C * T]) ->
  "embeddings" [B, C, H] and, for C = 2, "similarity" [B]: the two vectors' cosine; packed rows
  (position_ids, instance_ids and cls_positions [B, K, C] besides) -> [B, K, C, H] and [B, K].
  normalize: unit-length embeddings. pooling None: {"sequence_output": float32 [N, T, H]}, the
  model an export holds (its server pools). trim_padding: the encoder runs on each batch's
  longest sequence (the same vectors); leave it off under XLA and on TPU.
  """

  def __init__(self, config, pooling="mean", normalize=True, num_sequences=1, layer=-1,
               trim_padding=False, causal=False, use_one_hot_embeddings=False,
               name="sentence_encoder", **kwargs):
    super().__init__(name=name, **kwargs)
    if pooling is not None and pooling not in POOLINGS:
      raise BertTfError(f"--pooling: {pooling!r} is not one of {', '.join(POOLINGS)}")
    self.config = config
    self.pooling, self.normalize = pooling, normalize
    self.num_sequences, self.layer, self.trim_padding = num_sequences, layer, trim_padding
    self.encoder = modeling.BertModel(config, causal=causal,
                                      use_one_hot_embeddings=use_one_hot_embeddings, name="bert")

  def _tokens(self, inputs, training):
    """(the pooled layer's token vectors, the encoder's inputs: trimmed with trim_padding)."""
    inputs = heads.trimmed_inputs(inputs) if self.trim_padding else heads.encoder_inputs(inputs)
    outputs = self.encoder(inputs, training=training)
    return outputs["encoder_outputs"][self.layer], inputs

  @modeling.not_converted
  def call(self, inputs, training=False):
    if "cls_positions" in inputs:  # packed rows: each sequence pooled over its own tokens
      sequence, encoded = self._tokens(inputs, training)
      vectors = pool_packed(sequence, encoded["instance_ids"], inputs["cls_positions"],
                            self.pooling)  # [B, K, C, H]
      return self._outputs(vectors)
    c = self.num_sequences
    if c > 1:  # [B, C * T] -> [B * C, T]: every sequence through the encoder at once
      inputs = {name: tf.reshape(t, [-1, t.shape[-1] // c])
                for name, t in heads.encoder_inputs(inputs).items()}
    sequence, inputs = self._tokens(inputs, training)
    if self.pooling is None:
      return {"sequence_output": tf.cast(sequence, tf.float32)}
    vectors = pool(sequence, inputs["input_mask"], self.pooling)  # [B * C, H]
    if c > 1:
      vectors = tf.reshape(vectors, [-1, c, vectors.shape[-1]])  # [B, C, H]
    return self._outputs(vectors)

  def _outputs(self, vectors):
    outputs = {"embeddings": normalized(vectors) if self.normalize else vectors}
    if self.num_sequences == 2:
      unit = normalized(vectors)
      outputs["similarity"] = tf.reduce_sum(unit[..., 0, :] * unit[..., 1, :], axis=-1)
    return outputs


# ---------------------------------------------------------------------------- losses


def pair_loss(loss, a, b, labels, weights=None, scale=20.0):
  """The mean training loss of pairs: vectors a, b [N, H], labels [N] (the scores scaled to
  [0, 1]; mnrl reads none), weights [N] (1.0 where a pair is real, 0.0 in a packed row's empty
  slot; None: all real). cosine gives the per-pair losses [N] (the caller averages them as every
  task's loss); cosent and mnrl, losses over the whole batch, a scalar."""
  a, b = normalized(tf.cast(a, tf.float32)), normalized(tf.cast(b, tf.float32))
  real = tf.ones_like(a[:, 0]) if weights is None else tf.cast(weights, tf.float32)  # [N]
  if loss == "cosine":
    return tf.square(tf.reduce_sum(a * b, axis=-1) - tf.cast(labels, tf.float32))
  if loss == "cosent":
    return _cosent(tf.reduce_sum(a * b, axis=-1) * scale, tf.cast(labels, tf.float32), real)
  if loss == "mnrl":
    return _multiple_negatives_ranking(a, b, real, scale)
  raise BertTfError(f"--loss: {loss!r} is not one of {', '.join(LOSSES)}")


def _cosent(scores, labels, real):
  """log(1 + sum over the pairs (i, j) with label_i < label_j of exp(s_i - s_j)) (CoSENT)."""
  differences = scores[:, tf.newaxis] - scores[tf.newaxis, :]  # [N, N]: s_i - s_j
  counted = ((labels[:, tf.newaxis] < labels[tf.newaxis, :]) &
             (real[:, tf.newaxis] > 0) & (real[tf.newaxis, :] > 0))
  terms = tf.where(counted, differences, _FAR_BELOW)
  return tf.reduce_logsumexp(tf.concat([tf.zeros([1]), tf.reshape(terms, [-1])], axis=0))


def _multiple_negatives_ranking(anchors, positives, real, scale):
  """The mean over the real anchors of the cross-entropy of picking their own positive among the
  batch's positives (cosines times scale)."""
  logits = scale * tf.matmul(anchors, positives, transpose_b=True)  # [N, N]
  logits += (1.0 - real[tf.newaxis, :]) * _FAR_BELOW  # an empty slot is no candidate
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=tf.range(tf.shape(logits)[0]), logits=logits)
  return tf.reduce_sum(losses * real) / tf.maximum(tf.reduce_sum(real), 1.0)

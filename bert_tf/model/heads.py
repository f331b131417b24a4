"""Task models: a BertModel encoder plus a small head on top, one class per kind of output
(a sequence's labels, a choice among sequences, a span, a label per token); the tasks
(bert_tf.tasks) pick theirs.

Every model here is a tf_keras.Model holding its encoder as `.encoder`, takes the input dict
{input_ids, input_mask, segment_ids} (other keys, such as label_ids, are ignored) and returns a dict
of float32 logits, so that losses stay float32 under a mixed precision policy. The classifier,
multiple-choice and token models also take packed rows (bert_tf.data.packing_finetune: position_ids,
instance_ids and cls_positions besides): per-example logits [B, K, ...] pooled at each example's
[CLS], per-token logits as usual.

Head variables carry the original scripts' names: run_classifier.py's `output_weights`
[num_labels, H] and `output_bias`, run_squad.py's `cls/squad/output_weights` [2, H] and
`cls/squad/output_bias` (the multiple-choice and token heads use the classifier's names). They are
built when the model is made, outside any Keras scope, so those are their full variable names.

bilstm_units (--bilstm_head, the paper's Table 5 "+ BiLSTM"): a randomly initialized BiLSTM of that
many units per direction between the encoder's sequence output and the output layer, under the
variable names `bilstm/{forward,backward}_lstm/lstm_cell/...`; the output layer then reads its
[B, T, 2 * bilstm_units] outputs (the classifier: its final states, see bilstm_final_states).
"""
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.model import modeling

INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
# The original's run_classifier.py and run_squad.py draw a new `output_weights` from a truncated
# normal of stddev 0.02 whatever the config's initializer_range; every head here does. (The
# dropout in front of the output layer stays the config's hidden_dropout_prob, where the original's
# classifier hard-codes 0.1: docs/compatibility.md, "Different on purpose".)
HEAD_INITIALIZER_RANGE = 0.02
# The span head's variable scope: the original run_squad.py's, so that its checkpoints load as
# they are.
SPAN_HEAD_SCOPE = "cls/squad"
# Packed rows (bert_tf.data.packing_finetune) add positions and the instances attention stays inside.
PACKED_INPUT_NAMES = ("position_ids", "instance_ids")


class OutputProjection(tf_keras.layers.Layer):
  """logits = x W^T + b with W [num_outputs, H], laid out as the original's `output_weights`.

  Computed in float32: the head is tiny, and its logits feed the loss.
  """

  def __init__(self, num_outputs, hidden_size, initializer_range, scope=None, **kwargs):
    super().__init__(dtype="float32", **kwargs)
    self.num_outputs = num_outputs
    self.initializer_range = initializer_range
    if scope:
      with tf.name_scope(scope + "/"):  # the trailing "/" makes the scope absolute
        self.build([None, hidden_size])
    else:
      self.build([None, hidden_size])

  def build(self, input_shape):
    self.output_weights = self.add_weight(
        "output_weights", shape=[self.num_outputs, int(input_shape[-1])],
        initializer=modeling.create_initializer(self.initializer_range))
    self.output_bias = self.add_weight(
        "output_bias", shape=[self.num_outputs], initializer="zeros")
    super().build(input_shape)

  def call(self, x):
    x = tf.cast(x, tf.float32)
    return tf.matmul(x, self.output_weights, transpose_b=True) + self.output_bias


def bidirectional_lstm(units, name="bilstm", input_size=None):
  """A float32 bidirectional LSTM (forward and backward outputs concatenated, return_sequences), as
  bilstm_sequence runs it; with input_size, built at once under the absolute scope `name/` (stable
  variable names, as OutputProjection's)."""
  lstm = tf_keras.layers.Bidirectional(
      tf_keras.layers.LSTM(units, return_sequences=True, dtype="float32", name="lstm"),
      name=name, dtype="float32")
  if input_size:
    with tf.name_scope(name + "/"):
      lstm.build(tf.TensorShape([None, None, input_size]))
  return lstm


def bilstm_sequence(lstms, x, input_mask, dropout, training):
  """x [B, T, D] through each bidirectional LSTM in turn, dropout in front of each; float32
  [B, T, 2 * units]. Padding (input_mask 0) is masked out of the LSTMs (each direction starts at
  its sequence's real end) and its outputs are 0, so padding changes no output."""
  mask = tf.cast(input_mask, tf.bool)
  x = tf.cast(x, tf.float32)
  for lstm in lstms:
    x = lstm(tf.cast(dropout(x, training=training), tf.float32), mask=mask, training=training)
  return x * tf.cast(mask, tf.float32)[:, :, tf.newaxis]


def bilstm_final_states(sequence, input_mask):
  """A sequence's summary from bilstm_sequence's outputs [B, T, 2U]: the forward LSTM's output at
  the last real position and the backward LSTM's at the first ([CLS]), each having read the whole
  sequence: [B, 2U]."""
  units = sequence.shape[-1] // 2
  last = tf.maximum(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1) - 1, 0)
  forward = tf.gather(sequence[:, :, :units], last, batch_dims=1)
  return tf.concat([forward, sequence[:, 0, units:]], axis=-1)


def sparse_cross_entropy(labels, logits, weights=None):
  """Mean softmax cross-entropy of integer labels; with weights, averaged over the weighted
  positions (e.g. the words of a tagging batch)."""
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  if weights is None:
    return tf.reduce_mean(losses)
  return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def correct_predictions(labels, logits):
  """1.0 where the highest logit is the label's, else 0.0 (a training step's accuracy)."""
  predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return tf.cast(predictions == tf.cast(labels, tf.int32), tf.float32)


def encoder_inputs(inputs):
  return {name: inputs[name] for name in INPUT_NAMES + PACKED_INPUT_NAMES if name in inputs}


def trimmed_inputs(inputs):
  """The encoder inputs cut to the batch's longest sequence (at least 1 position), so that padding
  costs no compute. Not under XLA or on TPU, which compile static shapes."""
  length = tf.maximum(tf.reduce_max(tf.reduce_sum(inputs["input_mask"], axis=1)), 1)
  return {name: t[:, :length] for name, t in encoder_inputs(inputs).items()}


def padded_like(values, inputs):
  """Per-position values [B, t, ...] of trimmed inputs padded with zeros back to the inputs' [B, T, ...]."""
  padding = tf.shape(inputs["input_ids"])[1] - tf.shape(values)[1]
  padded = tf.pad(values, [[0, 0], [0, padding]] + [[0, 0]] * (values.shape.rank - 2))
  padded.set_shape(inputs["input_ids"].shape.concatenate(values.shape[2:]))
  return padded


class _TaskModel(tf_keras.Model):
  """The encoder, as `.encoder`, the dropout in front of every task's output layer, and with
  bilstm_units, a BiLSTM (`.bilstm`) between the two (see the module docstring).

  trim_padding=True runs the encoder on each batch's longest sequence only (the outputs are the same:
  padding is masked out of attention); leave it off under XLA and on TPU. causal: the encoder
  attends left to right only (fine-tuning a --left_to_right pre-trained model as the paper does);
  the model then carries a `left_to_right` marker variable, so its checkpoints say so.
  """
  # Whether training runs at full length even with trim_padding (a loss that reads the outputs at
  # the padding).
  untrimmed_in_training = False

  def __init__(self, config, dropout_rate, trim_padding=False, bilstm_units=None, causal=False,
               **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.trim_padding = trim_padding
    self.encoder = modeling.BertModel(config, causal=causal, name="bert")
    self.causal = causal
    if causal:
      self.left_to_right = tf.Variable(True, trainable=False, name=modeling.LEFT_TO_RIGHT_MARKER)
    rate = config.hidden_dropout_prob if dropout_rate is None else dropout_rate
    self.dropout = modeling.Dropout(rate)
    self.bilstm_units = bilstm_units
    self.bilstm = (bidirectional_lstm(bilstm_units, input_size=config.hidden_size)
                   if bilstm_units else None)
    # The width of what the output layer reads.
    self.head_input_size = 2 * bilstm_units if bilstm_units else config.hidden_size

  def encode(self, inputs, training):
    """(the encoder's outputs, its inputs): `inputs` trimmed to the longest sequence when
    trim_padding."""
    if self.bilstm is not None and "instance_ids" in inputs:
      raise BertTfError("--pack_sequences: not with --bilstm_head (its LSTM would read across "
                        "the examples of a row)")
    trim = self.trim_padding and not (training and self.untrimmed_in_training)
    inputs = trimmed_inputs(inputs) if trim else encoder_inputs(inputs)
    return self.encoder(inputs, training=training), inputs

  def sequence_features(self, inputs, training):
    """What the output layer reads at each position (before the dropout in front of it): the
    sequence output, or with a BiLSTM its outputs; and the (trimmed) encoder inputs."""
    outputs, inputs = self.encode(inputs, training)
    sequence = outputs["sequence_output"]
    if self.bilstm is not None:
      sequence = bilstm_sequence([self.bilstm], sequence, inputs["input_mask"], self.dropout,
                                 training)
    return sequence, inputs

  def full_length(self, values, inputs):
    """Per-position values back to the inputs' sequence length."""
    return padded_like(values, inputs) if self.trim_padding else values

  def pooled_outputs(self, outputs, inputs):
    """The pooled [CLS] output [B, H]; of packed rows (bert_tf.data.packing_finetune), the pooler at
    each example's [CLS] (inputs["cls_positions"] [B, K] or [B, K, C]): [B, K(, C), H]."""
    positions = inputs.get("cls_positions")
    if positions is None:
      return outputs["pooled_output"]
    pooled = self.encoder.pooler(modeling.gather_positions(
        outputs["sequence_output"], tf.reshape(positions, [tf.shape(positions)[0], -1])))
    return tf.reshape(pooled, tf.concat([tf.shape(positions), [pooled.shape[-1]]], axis=0))


class BertClassifier(_TaskModel):
  """Sequence classification over the pooled [CLS] output (run_classifier.py's create_model), or
  with bilstm_units over the BiLSTM's final states (bilstm_final_states).

  num_labels=1 makes it a regressor (e.g. STS-B): `logits` [B, 1] is the predicted score.
  """

  def __init__(self, config, num_labels, dropout_rate=None, name="bert_classifier", **kwargs):
    super().__init__(config, dropout_rate, name=name, **kwargs)
    self.num_labels = num_labels
    self.classifier = OutputProjection(num_labels, self.head_input_size, HEAD_INITIALIZER_RANGE,
                                       name="classifier")

  @modeling.not_converted
  def call(self, inputs, training=False):
    if self.bilstm is None:
      pooled = self.pooled_outputs(self.encode(inputs, training)[0], inputs)
    else:
      sequence, inputs = self.sequence_features(inputs, training)
      pooled = bilstm_final_states(sequence, inputs["input_mask"])
    return {"logits": self.classifier(self.dropout(pooled, training=training))}


class BertMultipleChoice(_TaskModel):
  """Multiple choice (e.g. SWAG): one vector scores each choice's pooled [CLS] state.

  Inputs are [B, num_choices * T] (as the records store them) or [B, num_choices, T];
  `logits` is [B, num_choices], to go through a softmax over the choices. Packed rows
  (bert_tf.data.packing_finetune: each example's choices in one row) give [B, K, num_choices].
  """

  def __init__(self, config, num_choices, dropout_rate=None, name="bert_multiple_choice",
               **kwargs):
    super().__init__(config, dropout_rate, name=name, **kwargs)
    self.num_choices = num_choices
    self.classifier = OutputProjection(1, config.hidden_size, HEAD_INITIALIZER_RANGE,
                                       name="classifier")

  @modeling.not_converted
  def call(self, inputs, training=False):
    if "cls_positions" in inputs:  # packed rows: every choice pooled at its own [CLS]
      outputs, _ = self.encode(inputs, training)
      pooled = self.dropout(self.pooled_outputs(outputs, inputs), training=training)
      return {"logits": self.classifier(pooled)[..., 0]}
    flat = {}
    for name in INPUT_NAMES:
      t = inputs[name]
      seq_length = t.shape[-1] if t.shape.rank == 3 else t.shape[-1] // self.num_choices
      flat[name] = tf.reshape(t, [-1, seq_length])
    outputs, _ = self.encode(flat, training)
    pooled = self.dropout(outputs["pooled_output"], training=training)
    return {"logits": tf.reshape(self.classifier(pooled), [-1, self.num_choices])}


class BertSpanLabeler(_TaskModel):
  """Spans (e.g. SQuAD's answers): start and end logits [B, T] from one linear layer over the
  sequence output (or the BiLSTM's outputs), under SPAN_HEAD_SCOPE.

  The original run_squad.py applies no dropout before its output layer, so the default here is
  none; pass dropout_rate to add some. Its loss is a softmax over every position, the padding's
  logits included, so training runs untrimmed: trimmed, a batch's loss (and the global norm its
  gradients are clipped to) would depend on its longest sequence, which the original's does not.
  """
  untrimmed_in_training = True

  def __init__(self, config, dropout_rate=0.0, name="bert_span_labeler", **kwargs):
    super().__init__(config, dropout_rate, name=name, **kwargs)
    self.span_head = OutputProjection(2, self.head_input_size, HEAD_INITIALIZER_RANGE,
                                      scope=SPAN_HEAD_SCOPE, name="span_head")

  @modeling.not_converted
  def call(self, inputs, training=False):
    sequence, _ = self.sequence_features(inputs, training)
    logits = self.span_head(self.dropout(sequence, training=training))
    logits = self.full_length(logits, inputs)  # [B, T, 2]
    return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}


class BertTokenClassifier(_TaskModel):
  """A label per token (e.g. NER): logits [B, T, num_labels] from one linear layer over the
  sequence output (or the BiLSTM's outputs)."""

  def __init__(self, config, num_labels, dropout_rate=None, name="bert_token_classifier",
               **kwargs):
    super().__init__(config, dropout_rate, name=name, **kwargs)
    self.num_labels = num_labels
    self.classifier = OutputProjection(num_labels, self.head_input_size, HEAD_INITIALIZER_RANGE,
                                       name="classifier")

  @modeling.not_converted
  def call(self, inputs, training=False):
    sequence, _ = self.sequence_features(inputs, training)
    logits = self.classifier(self.dropout(sequence, training=training))
    return {"logits": self.full_length(logits, inputs)}


# ---------------------------------------------------------------------------- feature-based tagging

# The paper's Table 7 choices of what a frozen BERT hands to the BiLSTM.
FEATURE_LAYERS = ("embeddings", "second_to_last", "last", "sum_last_four", "concat_last_four",
                  "sum_all")


def select_layers(outputs, feature_layers):
  """The BertModel outputs a feature-based model reads (the paper's Table 7), [B, T, H or 4H]."""
  layers = outputs["encoder_outputs"]
  if feature_layers == "embeddings":
    return outputs["embedding_output"]
  if feature_layers == "second_to_last":
    return layers[-2]
  if feature_layers == "last":
    return layers[-1]
  if feature_layers == "sum_last_four":
    return tf.add_n(layers[-4:])
  if feature_layers == "concat_last_four":
    return tf.concat(layers[-4:], axis=-1)
  if feature_layers == "sum_all":
    return tf.add_n(layers)
  raise BertTfError(f"--feature_layers: {feature_layers!r} is not one of {FEATURE_LAYERS}")


class BertFeatureTagger(tf_keras.Model):
  """Feature-based tagging (the paper's Table 7 NER): a frozen encoder's `feature_layers` into a
  two-layer BiLSTM (`lstm_units` per direction) and a linear classifier; `logits`
  [B, T, num_labels] float32.

  The encoder is not trained (no gradient, no dropout); padding is masked out of the LSTMs
  (bilstm_sequence, as the fine-tuning models' --bilstm_head).
  trim_padding: as the task models of py.
  """

  def __init__(self, config, num_labels, feature_layers="concat_last_four", lstm_units=768,
               dropout_rate=None, trim_padding=False, name="bert_feature_tagger", **kwargs):
    super().__init__(name=name, **kwargs)
    self.trim_padding = trim_padding
    if feature_layers not in FEATURE_LAYERS:
      raise BertTfError(f"--feature_layers: {feature_layers!r} is not one of {FEATURE_LAYERS}")
    if feature_layers in ("sum_last_four", "concat_last_four") and config.num_hidden_layers < 4:
      raise BertTfError(f"--feature_layers: {feature_layers} needs at least 4 layers, the model "
                        f"has {config.num_hidden_layers}")
    self.config = config
    self.num_labels = num_labels
    self.feature_layers = feature_layers
    self.encoder = modeling.BertModel(config, name="bert")
    self.encoder.trainable = False
    rate = config.hidden_dropout_prob if dropout_rate is None else dropout_rate
    self.dropout = modeling.Dropout(rate)
    self.lstms = [bidirectional_lstm(lstm_units, name=f"bilstm_{i}") for i in range(2)]
    self.classifier = OutputProjection(num_labels, hidden_size=2 * lstm_units,
                                             initializer_range=config.initializer_range,
                                             name="classifier")

  @modeling.not_converted
  def call(self, inputs, training=False):
    full_inputs = inputs
    inputs = trimmed_inputs(inputs) if self.trim_padding else encoder_inputs(inputs)
    outputs = self.encoder(inputs, training=False)
    x = tf.stop_gradient(select_layers(outputs, self.feature_layers))
    x = bilstm_sequence(self.lstms, x, inputs["input_mask"], self.dropout, training)
    logits = self.classifier(self.dropout(x, training=training))
    return {"logits": padded_like(logits, full_inputs) if self.trim_padding else logits}

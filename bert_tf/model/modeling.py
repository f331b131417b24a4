"""The BERT encoder and pretraining heads, with the original release's variable names.

Every variable is created when the model is constructed, under name scopes that reproduce the
original TF1 scopes (`bert/encoder/layer_0/attention/self/query/kernel`, `cls/predictions/...`),
so an original checkpoint maps onto our variables by name and back.

The encoder keeps activations as 2-D [batch * seq, hidden] tensors and does every dense layer as
`tf.matmul` + `tf.nn.bias_add` (+ GELU): on CPU, oneDNN fuses exactly that pattern.
Under a mixed precision policy, matmuls run in the compute dtype while the embeddings, LayerNorm
and the attention softmax run in float32; the head logits are float32.
"""
import math
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

from bert_tf.model import activations  # noqa: E402
from bert_tf.model import objectives  # noqa: E402

LAYER_NORM_EPSILON = 1e-12
# The original adds this to attention logits of masked positions instead of -inf.
MASK_ADDER = -10000.0


def create_initializer(initializer_range=0.02):
  return tf_keras.initializers.TruncatedNormal(stddev=initializer_range)


def _build_in_scope(layer, input_shape=None):
  """Creates a sub-layer's variables under its name, inside the caller's current scope."""
  with tf.name_scope(layer.name):
    layer.build(input_shape)


# The models' own Python needs no AutoGraph (no branch or loop on a tensor's value): their calls
# run as written inside a tf.function, where converting every layer's code costs each run seconds
# of CPU in tracing (training, evaluation, prediction and export each trace the model).
not_converted = tf.autograph.experimental.do_not_convert


class Dense2D(tf_keras.layers.Layer):
  """A dense layer (`kernel`, `bias`) done as 2-D matmul + bias_add, the pattern oneDNN fuses.

  Inputs of rank > 2 are flattened to 2-D and reshaped back.
  """

  def __init__(self, input_dim, units, activation=None, initializer_range=0.02, **kwargs):
    super().__init__(**kwargs)
    self.input_dim = input_dim
    self.units = units
    self.activation = activations.get_activation(activation)
    self.training_activation = activations.training_activation(self.activation)
    self.initializer_range = initializer_range

  def build(self, input_shape=None):
    self.kernel = self.add_weight("kernel", shape=[self.input_dim, self.units],
                                  initializer=create_initializer(self.initializer_range))
    self.bias = self.add_weight("bias", shape=[self.units], initializer="zeros")
    super().build(input_shape)

  def call(self, x, training=False):
    rank = x.shape.rank
    if rank != 2:
      leading = tf.shape(x)[:-1]
      x = tf.reshape(x, [-1, self.input_dim])
    y = tf.nn.bias_add(tf.matmul(x, self.kernel), self.bias)
    activation = (self.training_activation if training is True
                  else activations.inference_activation(self.activation))
    if activation is not None:
      y = activation(y)
    if rank != 2:
      y = tf.reshape(y, tf.concat([leading, [self.units]], axis=0))
    return y


class LayerNorm(tf_keras.layers.Layer):
  """The original's layer normalization (`gamma`, `beta`, epsilon 1e-12), always in float32.

  Returns float32; callers cast back to their compute dtype.
  """

  def __init__(self, hidden_size, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.hidden_size = hidden_size

  def build(self, input_shape=None):
    self.gamma = self.add_weight("gamma", shape=[self.hidden_size], initializer="ones")
    self.beta = self.add_weight("beta", shape=[self.hidden_size], initializer="zeros")
    super().build(input_shape)

  def call(self, x):
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    scale = tf.math.rsqrt(variance + LAYER_NORM_EPSILON) * self.gamma
    return (x - mean) * scale + self.beta


class Dropout(tf_keras.layers.Dropout):
  """tf_keras Dropout whose training mask costs 16 random bits per element instead of a float.

  One 32-bit Philox draw of the layer's tf.random.Generator masks two elements, which halves the
  random generation, a sizeable part of a CPU training step, and the drop probability is exact to
  2^-16 in every dtype (a bfloat16 uniform sample has 7 bits, so rate 0.1 dropped 10.16%). Layers
  without a generator (legacy random ops) fall back to tf_keras Dropout.
  """

  def call(self, inputs, training=None):
    self._random_generator._maybe_init()  # pylint: disable=protected-access
    generator = self._random_generator._generator  # pylint: disable=protected-access
    if (not isinstance(generator, tf.random.Generator) or self.noise_shape is not None
        or not 0 < self.rate < 1):
      return super().call(inputs, training=training)
    if training is None:
      training = tf_keras.backend.learning_phase()

    def dropped():
      size = tf.size(inputs)
      bits = generator.uniform_full_int([(size + 1) // 2], dtype=tf.uint32)
      halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]
      keep = tf.reshape(halves, tf.shape(inputs)) >= tf.constant(round(self.rate * 65536),
                                                                   tf.uint16)
      scaled = inputs * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
      return tf.where(keep, scaled, tf.zeros([], inputs.dtype))

    return tf.__internal__.smart_cond.smart_cond(training, dropped, lambda: tf.identity(inputs))


class Embeddings(tf_keras.layers.Layer):
  """Word + token type + position embeddings, LayerNorm and dropout, in float32.

  use_one_hot_embeddings: look the words up as a one-hot matmul, as the original did on TPU
  (--use_one_hot_embeddings); the values are the same as a gather's.
  """

  def __init__(self, config, use_one_hot_embeddings=False, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.config = config
    self.use_one_hot_embeddings = use_one_hot_embeddings
    self.layer_norm = LayerNorm(config.hidden_size, name="LayerNorm")
    self.dropout = Dropout(config.hidden_dropout_prob)

  def build(self, input_shape=None):
    config = self.config
    # One initializer object per variable: tf_keras repeats an unseeded initializer's values.
    def initializer():
      return create_initializer(config.initializer_range)

    self.word_embeddings = self.add_weight(
        "word_embeddings", shape=[config.vocab_size, config.hidden_size], initializer=initializer())
    self.token_type_embeddings = self.add_weight(
        "token_type_embeddings", shape=[config.type_vocab_size, config.hidden_size],
        initializer=initializer())
    self.position_embeddings = self.add_weight(
        "position_embeddings", shape=[config.max_position_embeddings, config.hidden_size],
        initializer=initializer())
    _build_in_scope(self.layer_norm)
    super().build(input_shape)

  def call(self, input_ids, segment_ids, position_ids=None, training=False):
    """position_ids: int [B, T], or None for 0, 1, ... in every row."""
    seq_length = tf.shape(input_ids)[1]
    # Gathers from the table's value, not the variable: a gather from the variable (ResourceGather)
    # switches it to copy-on-read, after which every read of the table, the optimizer's
    # included, copies all of it.
    table = tf.convert_to_tensor(self.word_embeddings)
    if self.use_one_hot_embeddings:
      x = tf.einsum("btv,vh->bth", tf.one_hot(input_ids, self.config.vocab_size), table)
    else:
      x = tf.gather(table, input_ids)
    x += tf.gather(self.token_type_embeddings, segment_ids)
    if position_ids is None:
      x += self.position_embeddings[tf.newaxis, :seq_length]
    else:
      x += tf.gather(tf.convert_to_tensor(self.position_embeddings), position_ids)
    return self.dropout(self.layer_norm(x), training=training)


class SelfAttention(tf_keras.layers.Layer):
  """`attention/self`: the query, key and value projections (`query`, `key`, `value`, each a
  Dense2D with the original's `kernel` and `bias`) and scaled dot-product attention over heads.

  The seam for attention implementations: a TransformerLayer takes the class
  ATTENTION_IMPLEMENTATIONS[config.attention_implementation] (as transformers picks its attention
  class from config._attn_implementation), and every implementation has these variables under
  these names, so a checkpoint loads into any of them. This one is the original's three matmuls.
  """

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    hidden, init = config.hidden_size, config.initializer_range
    self.num_heads = config.num_attention_heads
    self.head_size = config.head_size
    self.hidden_size = hidden
    self.query = Dense2D(hidden, hidden, initializer_range=init, name="query")
    self.key = Dense2D(hidden, hidden, initializer_range=init, name="key")
    self.value = Dense2D(hidden, hidden, initializer_range=init, name="value")
    self.dropout = Dropout(config.attention_probs_dropout_prob)

  def build(self, input_shape=None):
    for layer in (self.query, self.key, self.value):
      _build_in_scope(layer)
    super().build(input_shape)

  def heads(self, x, batch_size, seq_length, training):
    """Query, key and value of x [B*T, H], each [B, N, T, D]."""
    def split(y):
      y = tf.reshape(y, [batch_size, seq_length, self.num_heads, self.head_size])
      return tf.transpose(y, [0, 2, 1, 3])
    return split(self.query(x)), split(self.key(x)), split(self.value(x))

  def call(self, x, attention_adder, batch_size, seq_length, training=False):
    """x: [B*T, H]; attention_adder: float32 [B, 1, 1 or T, T] of 0 / -10000 -> [B*T, H]."""
    query, key, value = self.heads(x, batch_size, seq_length, training)
    scores = tf.matmul(query, key, transpose_b=True)  # [B, N, T, T]
    scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(self.head_size)) + attention_adder
    probs = tf.cast(tf.nn.softmax(scores), x.dtype)
    probs = self.dropout(probs, training=training)
    context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])  # [B, T, N, D]
    return tf.reshape(context, [batch_size * seq_length, self.hidden_size])


class FusedQKVSelfAttention(SelfAttention):
  """SelfAttention whose inference does the three projections as ONE matmul: the query, key and
  value kernels (and biases) are concatenated at call time into [H, 3H], and one transpose splits
  the heads of all three. Same variables, same names; training steps take the original's three
  matmuls. The speed-up is measured in BENCHMARKS.md (bench/bench_cpu_inference.py)."""

  def heads(self, x, batch_size, seq_length, training):
    if training is True:
      return super().heads(x, batch_size, seq_length, training)
    layers = (self.query, self.key, self.value)
    kernel = tf.concat([layer.kernel for layer in layers], axis=1)  # [H, 3H]
    bias = tf.concat([layer.bias for layer in layers], axis=0)  # [3H]
    qkv = tf.nn.bias_add(tf.matmul(x, tf.cast(kernel, x.dtype)), tf.cast(bias, x.dtype))
    qkv = tf.reshape(qkv, [batch_size, seq_length, 3, self.num_heads, self.head_size])
    qkv = tf.transpose(qkv, [2, 0, 3, 1, 4])  # [3, B, N, T, D]
    return qkv[0], qkv[1], qkv[2]


# config.attention_implementation (a runtime attribute, not a bert_config.json field) -> class.
ATTENTION_IMPLEMENTATIONS = {"separate_qkv": SelfAttention, "fused_qkv": FusedQKVSelfAttention}
# The original's three matmuls: fused_qkv alone (oneDNN off) is no faster (BENCHMARKS.md,
# inference-paths), so it is opt-in.
DEFAULT_ATTENTION = "separate_qkv"


def attention_class(config):
  """The SelfAttention class config.attention_implementation names (default: separate_qkv)."""
  name = getattr(config, "attention_implementation", None) or DEFAULT_ATTENTION
  if name not in ATTENTION_IMPLEMENTATIONS:
    raise ValueError(f"attention_implementation {name!r} is not one of "
                     f"{sorted(ATTENTION_IMPLEMENTATIONS)}")
  return ATTENTION_IMPLEMENTATIONS[name]


class TransformerLayer(tf_keras.layers.Layer):
  """One post-LayerNorm transformer block, on 2-D [batch * seq, hidden] activations."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    hidden, inner, init = config.hidden_size, config.intermediate_size, config.initializer_range
    self.hidden_size = hidden
    self.attention = attention_class(config)(config, name="attention/self")
    # The projections stay attributes of the layer too: object-based checkpoints written before
    # the attention layer existed find them at transformer_layers/<i>/query etc.
    self.query, self.key, self.value = (self.attention.query, self.attention.key,
                                        self.attention.value)
    self.attention_output = Dense2D(hidden, hidden, initializer_range=init,
                                    name="attention/output/dense")
    self.attention_layer_norm = LayerNorm(hidden, name="attention/output/LayerNorm")
    self.intermediate = Dense2D(hidden, inner, activation=config.hidden_act,
                                initializer_range=init, name="intermediate/dense")
    self.output_dense = Dense2D(inner, hidden, initializer_range=init, name="output/dense")
    self.output_layer_norm = LayerNorm(hidden, name="output/LayerNorm")
    self.attention_dropout = self.attention.dropout
    self.hidden_dropout = Dropout(config.hidden_dropout_prob)

  def build(self, input_shape=None):
    for layer in (self.attention, self.attention_output, self.attention_layer_norm,
                  self.intermediate, self.output_dense, self.output_layer_norm):
      _build_in_scope(layer)
    super().build(input_shape)

  def call(self, x, attention_adder, batch_size, seq_length, training=False):
    """x: [B*T, H]; attention_adder: float32 [B, 1, 1 or T, T] of 0 / -10000."""
    context = self.attention(x, attention_adder, batch_size, seq_length, training=training)
    attention = self.hidden_dropout(self.attention_output(context), training=training)
    attention = tf.cast(self.attention_layer_norm(attention + x), x.dtype)
    output = self.output_dense(self.intermediate(attention, training=training))
    output = self.hidden_dropout(output, training=training)
    return tf.cast(self.output_layer_norm(output + attention), x.dtype)


# The name of the variable a fine-tuned left-to-right (causal) task model carries in its
# checkpoints, so that whatever loads them (export, predictor, a resumed run) attends as it did.
LEFT_TO_RIGHT_MARKER = "left_to_right"


def attention_mask_adder(input_mask, causal=False, instance_ids=None):
  """float32 [B, 1, 1 or T, T]: 0 where attention is allowed, -10000 where it is not.

  instance_ids (int [B, T], 0 on padding; packed sequences): a position attends only to the
  positions of its own instance (a block-diagonal mask), and input_mask is not needed.
  """
  if instance_ids is None:
    # expand_dims, not [:, newaxis, newaxis, :]: TensorFlow Lite has no new-axis strided slice
    allowed = tf.expand_dims(tf.expand_dims(tf.cast(input_mask, tf.float32), 1), 1)
  else:
    keys = instance_ids[:, tf.newaxis, :]
    allowed = tf.cast((instance_ids[:, :, tf.newaxis] == keys) & (keys > 0),
                      tf.float32)[:, tf.newaxis]
  if causal:
    seq_length = tf.shape(input_mask)[1]
    lower = tf.linalg.band_part(tf.ones([seq_length, seq_length], tf.float32), -1, 0)
    allowed = allowed * lower[tf.newaxis, tf.newaxis]
  return (1.0 - allowed) * MASK_ADDER


class BertModel(tf_keras.Model):
  """The BERT encoder.

  `model({"input_ids", "input_mask", "segment_ids"}, training)` (int32 [B, T]; the mask defaults
  to all ones and the segments to zeros; packed rows add "position_ids" and "instance_ids", see
  bert_tf.data.packing) returns {"sequence_output": [B, T, H],
  "pooled_output": [B, H], "encoder_outputs": [L x [B, T, H]], "embedding_output": [B, T, H]},
  in the policy's compute dtype. `causal=True` lets each position attend only to itself and the
  positions on its left (the paper's left-to-right ablation); the pooler then reads the last real
  token, the only one that has seen the whole sequence (as GPT's classifier reads its last token),
  instead of [CLS], which has seen only itself.
  """

  def __init__(self, config, causal=False, use_one_hot_embeddings=False, name="bert", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.causal = causal
    self.embeddings = Embeddings(config, use_one_hot_embeddings, name="embeddings")
    self.transformer_layers = [
        TransformerLayer(config, name=f"encoder/layer_{i}")
        for i in range(config.num_hidden_layers)]
    self.pooler = Dense2D(config.hidden_size, config.hidden_size, activation="tanh",
                          initializer_range=config.initializer_range, name="pooler/dense")
    # A trailing "/" makes the scope absolute: the names stay `bert/...` whatever scope the
    # model is constructed in (e.g. inside a task model).
    with tf.name_scope(name + "/"):
      _build_in_scope(self.embeddings)
      for layer in self.transformer_layers:
        _build_in_scope(layer)
      _build_in_scope(self.pooler)
    self.built = True

  @property
  def embedding_table(self):
    return self.embeddings.word_embeddings

  def get_config(self):
    return {"config": self.config.to_dict(), "causal": self.causal, "name": self.name}

  @not_converted
  def call(self, inputs, training=False):
    input_ids = inputs["input_ids"]
    input_mask = inputs.get("input_mask")
    if input_mask is None:
      input_mask = tf.ones_like(input_ids)
    segment_ids = inputs.get("segment_ids")
    if segment_ids is None:
      segment_ids = tf.zeros_like(input_ids)
    batch_size, seq_length = tf.shape(input_ids)[0], tf.shape(input_ids)[1]
    hidden_size = self.config.hidden_size

    embedding_output = tf.cast(self.embeddings(input_ids, segment_ids, inputs.get("position_ids"),
                                               training=training), self.compute_dtype)
    attention_adder = attention_mask_adder(input_mask, self.causal, inputs.get("instance_ids"))
    x = tf.reshape(embedding_output, [batch_size * seq_length, hidden_size])
    encoder_outputs = []
    for layer in self.transformer_layers:
      x = layer(x, attention_adder, batch_size, seq_length, training=training)
      encoder_outputs.append(tf.reshape(x, [batch_size, seq_length, hidden_size]))
    sequence_output = encoder_outputs[-1]
    if self.causal:
      last = tf.maximum(tf.reduce_sum(tf.cast(input_mask, tf.int32), axis=1) - 1, 0)
      pooled_output = self.pooler(tf.gather(sequence_output, last, axis=1, batch_dims=1))
    else:
      pooled_output = self.pooler(sequence_output[:, 0])
    return {
        "sequence_output": sequence_output,
        "pooled_output": pooled_output,
        "encoder_outputs": encoder_outputs,
        "embedding_output": embedding_output,
    }


def gather_positions(sequence_output, positions):
  """[B, T, H] gathered at int [B, P] positions -> [B * P, H]."""
  batch_size, seq_length = tf.shape(sequence_output)[0], tf.shape(sequence_output)[1]
  width = sequence_output.shape[-1]
  offsets = tf.range(batch_size, dtype=positions.dtype)[:, tf.newaxis] * tf.cast(
      seq_length, positions.dtype)
  flat_positions = tf.reshape(positions + offsets, [-1])
  flat_sequence = tf.reshape(sequence_output, [-1, width])
  return tf.gather(flat_sequence, flat_positions)


class MaskedLMHead(tf_keras.layers.Layer):
  """`cls/predictions`: transform (dense + activation + LayerNorm), then the word embeddings
  transposed (tied weights) plus `output_bias`. Logits are float32."""

  def __init__(self, config, **kwargs):
    super().__init__(**kwargs)
    self.config = config
    self.transform = Dense2D(config.hidden_size, config.hidden_size,
                             activation=config.hidden_act,
                             initializer_range=config.initializer_range, name="transform/dense")
    self.layer_norm = LayerNorm(config.hidden_size, name="transform/LayerNorm")

  def build(self, input_shape=None):
    _build_in_scope(self.transform)
    _build_in_scope(self.layer_norm)
    # Added to float32 logits, so it is read in float32 whatever the policy.
    self.output_bias = self.add_weight("output_bias", shape=[self.config.vocab_size],
                                       initializer="zeros", experimental_autocast=False)
    super().build(input_shape)

  def call(self, sequence_output, positions, embedding_table):
    batch_size, num_positions = tf.shape(positions)[0], tf.shape(positions)[1]
    x = gather_positions(sequence_output, positions)
    x = tf.cast(self.layer_norm(self.transform(x)), self.compute_dtype)
    logits = tf.matmul(x, tf.cast(embedding_table, self.compute_dtype), transpose_b=True)
    logits = tf.nn.bias_add(tf.cast(logits, tf.float32), self.output_bias)
    return tf.reshape(logits, [batch_size, num_positions, self.config.vocab_size])


class NextSentenceHead(tf_keras.layers.Layer):
  """`cls/seq_relationship`: [B, H] pooled output -> float32 [B, 2] logits."""

  def __init__(self, config, **kwargs):
    kwargs["dtype"] = "float32"
    super().__init__(**kwargs)
    self.config = config

  def build(self, input_shape=None):
    self.output_weights = self.add_weight(
        "output_weights", shape=[2, self.config.hidden_size],
        initializer=create_initializer(self.config.initializer_range))
    self.output_bias = self.add_weight("output_bias", shape=[2], initializer="zeros")
    super().build(input_shape)

  def call(self, pooled_output):
    return tf.nn.bias_add(tf.matmul(pooled_output, self.output_weights, transpose_b=True),
                          self.output_bias)


class BertPretrainer(tf_keras.Model):
  """`.encoder` (a BertModel) + the original's masked LM and next sentence heads.

  `pretrainer(features, training)`, where features also hold int32 `masked_lm_positions` [B, P],
  returns the encoder outputs plus float32 "mlm_logits" [B, P, V] and "nsp_logits" [B, 2].
  Packed rows (bert_tf.data.packing) also hold `next_sentence_positions` [B, K], each instance's
  [CLS]: "nsp_logits" are then [B, K, 2], each from the pooler at its instance's [CLS].
  """

  def __init__(self, config, causal=False, name="pretrainer", **kwargs):
    super().__init__(name=name, **kwargs)
    self.config = config
    self.causal = causal
    self.encoder = BertModel(config, causal=causal)
    self.masked_lm = MaskedLMHead(config, name="predictions")
    self.next_sentence = NextSentenceHead(config, name="seq_relationship")
    with tf.name_scope("cls/"):
      _build_in_scope(self.masked_lm)
      _build_in_scope(self.next_sentence)
    self.built = True

  def get_config(self):
    return {"config": self.config.to_dict(), "causal": self.causal, "name": self.name}

  @not_converted
  def call(self, features, training=False):
    outputs = dict(self.encoder(features, training=training))
    outputs[objectives.MLM_LOGITS] = self.masked_lm(
        outputs["sequence_output"], features[objectives.MASKED_LM_POSITIONS],
        self.encoder.embedding_table)
    cls_positions = features.get(objectives.NEXT_SENTENCE_POSITIONS)
    if cls_positions is None:
      outputs[objectives.NSP_LOGITS] = self.next_sentence(outputs["pooled_output"])
    else:
      pooled = self.encoder.pooler(gather_positions(outputs["sequence_output"], cls_positions))
      outputs[objectives.NSP_LOGITS] = tf.reshape(
          self.next_sentence(pooled), tf.concat([tf.shape(cls_positions), [2]], axis=0))
    return outputs

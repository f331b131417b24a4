"""The original release's `modeling` module (google-research/bert's modeling.py, with the names
bert-tensorflow 1.0.4 added), for code written against it: `modeling.BertModel(config,
is_training, input_ids, ...)` and its getters, the functions heads are built from, and
get_assignment_map_from_checkpoint for tf.compat.v1.train.init_from_checkpoint.

Variables come from tf.compat.v1.get_variable under the original's names and variable scopes, so
an original checkpoint loads by name, reuse and custom scopes work as they did, and everything runs
in TF1-style graph code (tf.compat.v1.disable_v2_behavior(), sessions, tf.gradients) as well as
eagerly and inside tf.function (where a layer decorated with
tf.compat.v1.keras.utils.track_tf1_style_variables keeps the variables across calls). BertModel,
transformer_model and layer_norm are our Keras encoder's classes (bert_tf.model.modeling) on those
variables, giving its numbers; the rest are the original's tensor steps. bert_tf's own Keras API
is bert_tf.model.modeling; docs/compatibility.md says what differs from the original here.
"""
import collections
import copy
import json
import math
import os
import types

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402

from bert_tf.model import activations  # noqa: E402
from bert_tf.model import modeling as keras_modeling  # noqa: E402
from bert_tf.model import tf1_variables  # noqa: E402

tf1 = tf.compat.v1

# The original's GELU, the tanh form (transformers' "gelu_new").
gelu = activations.gelu


class BertConfig:
  """Configuration for `BertModel`, as the original's: a plain record of its fields, unchecked,
  and from_dict keeps every key it is given. bert_tf's own checked config is
  bert_tf.model.config.BertConfig (BertConfig.from_dict(config.to_dict()) converts)."""

  def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
               initializer_range=0.02):
    """hidden_act: a name (see get_activation) or a function."""
    self.vocab_size = vocab_size
    self.hidden_size = hidden_size
    self.num_hidden_layers = num_hidden_layers
    self.num_attention_heads = num_attention_heads
    self.hidden_act = hidden_act
    self.intermediate_size = intermediate_size
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.max_position_embeddings = max_position_embeddings
    self.type_vocab_size = type_vocab_size
    self.initializer_range = initializer_range

  @classmethod
  def from_dict(cls, json_object):
    config = cls(vocab_size=None)
    config.__dict__.update(json_object)
    return config

  @classmethod
  def from_json_file(cls, json_file):
    with tf.io.gfile.GFile(json_file, "r") as reader:
      return cls.from_dict(json.loads(reader.read()))

  def to_dict(self):
    return copy.deepcopy(self.__dict__)

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"


class _EncoderConfig(types.SimpleNamespace):
  """The fields our Keras encoder's classes read."""

  def to_dict(self):
    return dict(vars(self))


def _check_heads(hidden_size, num_attention_heads):
  if hidden_size % num_attention_heads:
    raise ValueError(f"The hidden size ({hidden_size}) is not a multiple of the number of "
                     f"attention heads ({num_attention_heads})")
  return hidden_size // num_attention_heads


def _as_written(activation):
  """activation as a function our Keras layers run as it is, where they would swap gelu for its
  fused training form (an XLA-compiled function call): a TF1 graph holds the original's ops."""
  if activation is None:
    return None
  return lambda x: activation(x)


def _encoder_config(config):
  fields = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
            "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
            "max_position_embeddings", "type_vocab_size", "initializer_range")
  values = {name: getattr(config, name) for name in fields}
  return _EncoderConfig(
      **values, hidden_act=_as_written(get_activation(config.hidden_act)),
      head_size=_check_heads(config.hidden_size, config.num_attention_heads),
      attention_implementation=getattr(config, "attention_implementation", None))


class BertModel:
  """BERT ("Bidirectional Encoder Representations from Transformers") on int32 [batch_size,
  seq_length] input_ids, as the original's: the model is built, and run, on these inputs when
  constructed; the getters return its tensors. Its variables are `<scope>/embeddings/...`,
  `<scope>/encoder/layer_<i>/...` and `<scope>/pooler/dense/...` (scope: default "bert").

  ```python
  model = modeling.BertModel(config=config, is_training=True, input_ids=input_ids,
                             input_mask=input_mask, token_type_ids=token_type_ids)
  logits = tf.matmul(model.get_pooled_output(), output_weights, transpose_b=True)
  ```

  is_training: False turns dropout off. use_one_hot_embeddings: look the words up as a one-hot
  matmul (as on TPU). `.encoder` is the bert_tf.model.modeling.BertModel it runs.
  """

  def __init__(self, config, is_training, input_ids, input_mask=None, token_type_ids=None,
               use_one_hot_embeddings=False, scope=None):
    config = copy.deepcopy(config)
    if not is_training:
      config.hidden_dropout_prob = 0.0
      config.attention_probs_dropout_prob = 0.0
    batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
    if input_mask is None:
      input_mask = tf.ones([batch_size, seq_length], tf.int32)
    if token_type_ids is None:
      token_type_ids = tf.zeros([batch_size, seq_length], tf.int32)
    self._input_ids = input_ids
    self._use_one_hot_embeddings = use_one_hot_embeddings
    self._word_embedding_output = None
    with tf1.variable_scope(scope, default_name="bert"):
      # The Keras model builds itself under the name scope of its name.
      name = tf1_variables.unused_name_scope("bert")
      with tf1_variables.keras_layers_on_get_variable(name):
        self.encoder = keras_modeling.BertModel(
            _encoder_config(config), use_one_hot_embeddings=use_one_hot_embeddings, name=name,
            dtype="float32")
      outputs = self.encoder({"input_ids": input_ids, "input_mask": input_mask,
                              "segment_ids": token_type_ids}, training=bool(is_training))
    static = input_ids.shape.as_list() + [config.hidden_size]
    for tensor in [outputs["embedding_output"], *outputs["encoder_outputs"]]:
      tensor.set_shape(static)
    outputs["pooled_output"].set_shape([static[0], config.hidden_size])
    self.embedding_table = self.encoder.embedding_table
    self.embedding_output = outputs["embedding_output"]
    self.all_encoder_layers = outputs["encoder_outputs"]
    self.sequence_output = self.all_encoder_layers[-1]
    self.pooled_output = outputs["pooled_output"]

  def get_pooled_output(self):
    """float [batch_size, hidden_size]: the pooler's tanh dense layer on the [CLS] position."""
    return self.pooled_output

  def get_sequence_output(self):
    """float [batch_size, seq_length, hidden_size]: the last encoder layer."""
    return self.sequence_output

  def get_all_encoder_layers(self):
    """[num_hidden_layers x float [batch_size, seq_length, hidden_size]]."""
    return self.all_encoder_layers

  def get_word_embedding_output(self):
    """float [batch_size, seq_length, hidden_size]: the word embeddings alone, before the
    position and token type embeddings are added (bert-tensorflow 1.0.4's). Built when first
    asked for, so that a graph that never reads it holds no op for it."""
    if self._word_embedding_output is None:
      self._word_embedding_output = _lookup(self.embedding_table, self._input_ids,
                                            self._use_one_hot_embeddings)
    return self._word_embedding_output

  def get_embedding_output(self):
    """float [batch_size, seq_length, hidden_size]: the sum of the word, position and token type
    embeddings after layer normalization (and dropout): the transformer's input."""
    return self.embedding_output

  def get_embedding_table(self):
    """The word embeddings variable, [vocab_size, hidden_size]."""
    return self.embedding_table


def get_activation(activation_string):
  """The function a config's hidden_act names, as the original maps them: "linear", "" or None ->
  None, "relu", "gelu" (the tanh form), "tanh"; also bert_tf's "gelu_exact", "gelu_new", "swish"
  and "silu". Any other string is a ValueError; a non-string is returned as it is."""
  if not isinstance(activation_string, str):
    return activation_string
  if not activation_string:
    return None
  return activations.get_activation(activation_string)


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
  """(OrderedDict checkpoint name -> the same name, {name: 1, name + ":0": 1}) for the variables
  of `tvars` whose names the checkpoint holds, for tf.compat.v1.train.init_from_checkpoint."""
  wanted = {tf1_variables.variable_name(var.name) for var in tvars}
  assignment_map = collections.OrderedDict()
  initialized_variable_names = {}
  for name, _ in tf1.train.list_variables(init_checkpoint):
    if name in wanted:
      assignment_map[name] = name
      initialized_variable_names[name] = 1
      initialized_variable_names[name + ":0"] = 1
  return assignment_map, initialized_variable_names


def dropout(input_tensor, dropout_prob):
  """input_tensor with each value dropped with probability dropout_prob (None or 0.0: none)."""
  if not dropout_prob:
    return input_tensor
  return tf.nn.dropout(input_tensor, rate=dropout_prob)


def layer_norm(input_tensor, name=None):
  """Layer normalization over the last axis, variables `<name or LayerNorm>/beta` and `/gamma`
  in the current variable scope (our Keras LayerNorm: epsilon 1e-12, computed in float32)."""
  with tf1.variable_scope(name, default_name="LayerNorm"):
    layer = keras_modeling.LayerNorm(input_tensor.shape.as_list()[-1], name="LayerNorm")
    tf1_variables.build_in_scope(layer)
    output = layer(tf.cast(input_tensor, tf.float32))
  return tf.cast(output, input_tensor.dtype)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
  return dropout(layer_norm(input_tensor, name), dropout_prob)


def create_initializer(initializer_range=0.02):
  """The truncated normal initializer of stddev initializer_range."""
  return tf1.truncated_normal_initializer(stddev=initializer_range)


def _lookup(table, input_ids, use_one_hot_embeddings):
  """Rows of table [V, E] at int input_ids [...] -> [..., E], gathered or as a one-hot matmul."""
  if not use_one_hot_embeddings:
    return tf.gather(table, input_ids)
  one_hot = tf.one_hot(tf.reshape(input_ids, [-1]), depth=get_shape_list(table)[0])
  width = get_shape_list(table)[1]
  return tf.reshape(tf.matmul(one_hot, table), get_shape_list(input_ids) + [width])


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
  """(float [batch_size, seq_length, embedding_size], the table variable) for int input_ids
  [batch_size, seq_length] (or [batch_size, seq_length, k]: the k lookups concatenated)."""
  if input_ids.shape.ndims == 2:
    input_ids = tf.expand_dims(input_ids, axis=-1)  # [B, S, 1]
  embedding_table = tf1.get_variable(word_embedding_name, [vocab_size, embedding_size],
                                     initializer=create_initializer(initializer_range))
  output = _lookup(embedding_table, input_ids, use_one_hot_embeddings)  # [B, S, k, E]
  shape = get_shape_list(input_ids)
  return tf.reshape(output, shape[:-1] + [shape[-1] * embedding_size]), embedding_table


def embedding_postprocessor(input_tensor, use_token_type=False, token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02, max_position_embeddings=512, dropout_prob=0.1):
  """input_tensor [batch_size, seq_length, width] plus token type and position embeddings (each
  optional), then layer_norm_and_dropout."""
  batch_size, seq_length, width = get_shape_list(input_tensor, expected_rank=3)
  output = input_tensor
  if use_token_type:
    if token_type_ids is None:
      raise ValueError("`token_type_ids` must be specified if `use_token_type` is True.")
    table = tf1.get_variable(token_type_embedding_name, [token_type_vocab_size, width],
                             initializer=create_initializer(initializer_range))
    # One-hot, as the original: the table is small.
    token_types = _lookup(table, tf.reshape(token_type_ids, [-1]), True)  # [B*S, W]
    output += tf.reshape(token_types, [batch_size, seq_length, width])
  if use_position_embeddings:
    table = tf1.get_variable(position_embedding_name, [max_position_embeddings, width],
                             initializer=create_initializer(initializer_range))
    with tf.control_dependencies([tf1.assert_less_equal(seq_length, max_position_embeddings)]):
      positions = tf.slice(table, [0, 0], [seq_length, -1])  # [S, W]
      output += tf.expand_dims(positions, 0)
  return layer_norm_and_dropout(output, dropout_prob)


def create_attention_mask_from_input_mask(from_tensor, to_mask):
  """float [batch_size, from_seq_length, to_seq_length]: 1 where the int to_mask [batch_size,
  to_seq_length] is 1 (every position may attend; only attending to padding is masked)."""
  batch_size, from_seq_length = get_shape_list(from_tensor, expected_rank=[2, 3])[:2]
  to_seq_length = get_shape_list(to_mask, expected_rank=2)[1]
  to_mask = tf.cast(tf.reshape(to_mask, [batch_size, 1, to_seq_length]), tf.float32)
  return tf.ones([batch_size, from_seq_length, 1], tf.float32) * to_mask


def _dense(input_tensor, units, initializer, activation, name):
  """A dense layer on the last axis of input_tensor (rank >= 2), its variables `name/kernel`
  [width, units] and `name/bias` in the current variable scope."""
  shape = get_shape_list(input_tensor)
  with tf1.variable_scope(name):
    kernel = tf1.get_variable("kernel", [input_tensor.shape.as_list()[-1], units],
                              initializer=initializer)
    bias = tf1.get_variable("bias", [units], initializer=tf1.zeros_initializer())
  output = tf.nn.bias_add(tf.matmul(reshape_to_matrix(input_tensor), kernel), bias)
  if activation is not None:
    output = activation(output)
  return reshape_from_matrix(output, shape)


def dense_layer_3d(input_tensor, num_attention_heads, size_per_head, initializer, activation,
                   name=None):
  """[batch, seq_length, width] -> [batch, seq_length, num_attention_heads, size_per_head]
  (bert-tensorflow 1.0.4's): `name/kernel` [width, heads * size] and `name/bias`."""
  output = _dense(input_tensor, num_attention_heads * size_per_head, initializer, activation,
                  name)
  return tf.reshape(output, get_shape_list(output)[:-1] + [num_attention_heads, size_per_head])


def dense_layer_3d_proj(input_tensor, hidden_size, num_attention_heads, head_size, initializer,
                        activation, name=None):
  """[batch, seq_length, num_attention_heads, head_size] -> [batch, seq_length, hidden_size]
  (bert-tensorflow 1.0.4's): `name/kernel` [heads * head_size, hidden_size] and `name/bias`."""
  shape = get_shape_list(input_tensor, expected_rank=4)
  merged = tf.reshape(input_tensor, shape[:2] + [num_attention_heads * head_size])
  return _dense(merged, hidden_size, initializer, activation, name)


def dense_layer_2d(input_tensor, output_size, initializer, activation, name=None):
  """[batch, seq_length, width] -> [batch, seq_length, output_size] (bert-tensorflow 1.0.4's)."""
  return _dense(input_tensor, output_size, initializer, activation, name)


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, query_act=None, key_act=None, value_act=None,
                    attention_probs_dropout_prob=0.0, initializer_range=0.02,
                    do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None):
  """Multi-headed attention from from_tensor [B, F, from_width] to to_tensor [B, T, to_width]
  (or both 2-D [B*F, ...], [B*T, ...], with batch_size, from_seq_length and to_seq_length
  given), variables `query`, `key`, `value` in the current variable scope. attention_mask
  [B, F, T] is 1 where attention is allowed. Returns float [B, F, N*H], or [B*F, N*H] with
  do_return_2d_tensor: the google-research/bert commit's shapes (bert-tensorflow 1.0.4's returns
  [B, F, N, H] and has no do_return_2d_tensor)."""
  from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
  to_shape = get_shape_list(to_tensor, expected_rank=[2, 3])
  if len(from_shape) != len(to_shape):
    raise ValueError("The rank of `from_tensor` must match the rank of `to_tensor`.")
  if len(from_shape) == 3:
    batch_size, from_seq_length, to_seq_length = from_shape[0], from_shape[1], to_shape[1]
  elif batch_size is None or from_seq_length is None or to_seq_length is None:
    raise ValueError("When passing in rank 2 tensors to attention_layer, the values for "
                     "`batch_size`, `from_seq_length`, and `to_seq_length` must all be specified.")
  width = num_attention_heads * size_per_head

  def heads(tensor, seq_length, act, name):  # -> [B, N, seq, H]
    projected = _dense(reshape_to_matrix(tensor), width, create_initializer(initializer_range),
                       act, name)
    projected = tf.reshape(projected, [batch_size, seq_length, num_attention_heads,
                                       size_per_head])
    return tf.transpose(projected, [0, 2, 1, 3])

  query = heads(from_tensor, from_seq_length, query_act, "query")
  key = heads(to_tensor, to_seq_length, key_act, "key")
  value = heads(to_tensor, to_seq_length, value_act, "value")
  scores = tf.matmul(query, key, transpose_b=True) * (1.0 / math.sqrt(float(size_per_head)))
  if attention_mask is not None:  # [B, F, T] -> an adder [B, 1, F, T] of 0 or -10000
    allowed = tf.cast(tf.expand_dims(attention_mask, axis=1), tf.float32)
    scores += (1.0 - allowed) * keras_modeling.MASK_ADDER
  probs = dropout(tf.nn.softmax(scores), attention_probs_dropout_prob)  # [B, N, F, T]
  context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])  # [B, F, N, H]
  if do_return_2d_tensor:
    return tf.reshape(context, [batch_size * from_seq_length, width])
  return tf.reshape(context, [batch_size, from_seq_length, width])


def transformer_model(input_tensor, attention_mask=None, hidden_size=768, num_hidden_layers=12,
                      num_attention_heads=12, intermediate_size=3072, intermediate_act_fn=gelu,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      initializer_range=0.02, do_return_all_layers=False):
  """The encoder's layers on input_tensor [batch_size, seq_length, hidden_size]: our Keras
  TransformerLayer, its variables `layer_<i>/...` in the current variable scope. attention_mask
  [batch_size, seq_length, seq_length] is 1 where attention is allowed. Returns the last layer,
  or with do_return_all_layers the list of every layer, each float [batch_size, seq_length,
  hidden_size]. Dropout applies wherever its probability is above 0, as in the original."""
  head_size = _check_heads(hidden_size, num_attention_heads)
  batch_size, seq_length, input_width = get_shape_list(input_tensor, expected_rank=3)
  if input_width != hidden_size:
    raise ValueError(f"The width of the input tensor ({input_width}) != hidden size "
                     f"({hidden_size})")
  config = _EncoderConfig(
      hidden_size=hidden_size, num_attention_heads=num_attention_heads, head_size=head_size,
      intermediate_size=intermediate_size, hidden_act=_as_written(intermediate_act_fn),
      hidden_dropout_prob=hidden_dropout_prob,
      attention_probs_dropout_prob=attention_probs_dropout_prob,
      initializer_range=initializer_range)
  if attention_mask is None:
    adder = tf.zeros([batch_size, 1, 1, seq_length], tf.float32)
  else:  # [B, 1, S, S]
    adder = (1.0 - tf.cast(tf.expand_dims(attention_mask, 1), tf.float32)) * (
        keras_modeling.MASK_ADDER)
  training = bool(hidden_dropout_prob or attention_probs_dropout_prob)
  x = tf.reshape(input_tensor, [-1, hidden_size])  # [B*S, H]
  all_layer_outputs = []
  for index in range(num_hidden_layers):
    layer = keras_modeling.TransformerLayer(config, name=f"layer_{index}",
                                            dtype=input_tensor.dtype.base_dtype.name)
    with tf1.variable_scope(layer.name):
      tf1_variables.build_in_scope(layer)
      x = layer(x, adder, batch_size, seq_length, training=training)
    output = tf.reshape(x, [batch_size, seq_length, hidden_size])
    output.set_shape(input_tensor.shape)
    all_layer_outputs.append(output)
  return all_layer_outputs if do_return_all_layers else all_layer_outputs[-1]


def _tensor_name(tensor):
  """A tensor's name for error messages (an eager tensor has none)."""
  try:
    return tensor.name
  except AttributeError:
    return "tensor"


def get_shape_list(tensor, expected_rank=None, name=None):
  """The shape of tensor as a list: static dimensions as ints, the others as scalar tensors.
  expected_rank (int or list of ints): a ValueError unless the rank is one of them."""
  if expected_rank is not None:
    assert_rank(tensor, expected_rank, name)
  shape = tensor.shape.as_list()
  dynamic = [index for index, dim in enumerate(shape) if dim is None]
  if dynamic:
    dynamic_shape = tf.shape(tensor)
    for index in dynamic:
      shape[index] = dynamic_shape[index]
  return shape


def reshape_to_matrix(input_tensor):
  """A tensor of rank >= 2 as a matrix [-1, width]."""
  ndims = input_tensor.shape.ndims
  if ndims < 2:
    raise ValueError(f"Input tensor must have at least rank 2. Shape = {input_tensor.shape}")
  if ndims == 2:
    return input_tensor
  return tf.reshape(input_tensor, [-1, input_tensor.shape.as_list()[-1]])


def reshape_from_matrix(output_tensor, orig_shape_list):
  """A matrix [-1, width] back to orig_shape_list's leading dimensions (reshape_to_matrix's
  inverse; orig_shape_list as get_shape_list gives it)."""
  if len(orig_shape_list) == 2:
    return output_tensor
  width = get_shape_list(output_tensor)[-1]
  return tf.reshape(output_tensor, list(orig_shape_list[:-1]) + [width])


def assert_rank(tensor, expected_rank, name=None):
  """A ValueError unless tensor's rank is expected_rank (an int or a list of ints)."""
  if name is None:
    name = _tensor_name(tensor)
  expected = {expected_rank} if isinstance(expected_rank, int) else set(expected_rank)
  actual_rank = tensor.shape.ndims
  if actual_rank not in expected:
    scope_name = tf1.get_variable_scope().name
    raise ValueError(f"For the tensor `{name}` in scope `{scope_name}`, the actual rank "
                     f"`{actual_rank}` (shape = {tensor.shape}) is not equal to the expected "
                     f"rank `{expected_rank}`")

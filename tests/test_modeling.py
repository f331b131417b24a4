"""The encoder and pretraining heads: original names and shapes, masking, dropout, precision."""
# pylint: disable=redefined-outer-name,unused-argument,g-import-not-at-top
import math
import os
import tempfile

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf.model import activations
from bert_tf.model.config import BertConfig
from bert_tf.model import modeling
from support.models import head_shapes
from support.models import original_encoder_shapes
from support.tiny import bert_config

CONFIG = bert_config(50, max_position_embeddings=16, type_vocab_size=2)


def features(batch=3, seq=9, seed=0):
  rng = np.random.RandomState(seed)
  input_mask = np.ones((batch, seq), np.int32)
  input_mask[1, 5:] = 0
  input_mask[2, 2:] = 0
  segment_ids = np.zeros((batch, seq), np.int32)
  segment_ids[:, 4:] = 1
  return {"input_ids": tf.constant(rng.randint(1, CONFIG.vocab_size, (batch, seq)), tf.int32),
          "input_mask": tf.constant(input_mask), "segment_ids": tf.constant(segment_ids),
          "masked_lm_positions": tf.constant(rng.randint(0, seq, (batch, 3)), tf.int32)}


@pytest.fixture
def bf16_policy():
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  yield
  tf_keras.mixed_precision.set_global_policy("float32")


def test_encoder_variables_have_original_names_and_shapes():
  model = modeling.BertModel(CONFIG)
  expected = {name + ":0": shape for name, shape in original_encoder_shapes(CONFIG).items()}
  got = {v.name: v.shape.as_list() for v in model.variables}
  assert got == expected
  assert len(model.variables) == len(expected)
  assert model.embedding_table.name == "bert/embeddings/word_embeddings:0"


def test_pretrainer_variables_have_original_names_inside_any_scope():
  with tf.name_scope("outer"):
    model = modeling.BertPretrainer(CONFIG)
  expected = dict(original_encoder_shapes(CONFIG), **head_shapes(CONFIG))
  got = {v.name[:-2]: v.shape.as_list() for v in model.variables}
  assert got == expected
  assert model.encoder.config is CONFIG


def test_outputs_shapes_and_dtypes():
  model = modeling.BertPretrainer(CONFIG)
  out = model(features())
  assert out["sequence_output"].shape == [3, 9, 32]
  assert out["pooled_output"].shape == [3, 32]
  assert out["embedding_output"].shape == [3, 9, 32]
  assert len(out["encoder_outputs"]) == 2
  np.testing.assert_array_equal(out["encoder_outputs"][-1], out["sequence_output"])
  assert out["mlm_logits"].shape == [3, 3, 50] and out["mlm_logits"].dtype == tf.float32
  assert out["nsp_logits"].shape == [3, 2] and out["nsp_logits"].dtype == tf.float32
  # The pooled output is tanh(dense([CLS])).
  pooler = model.encoder.pooler
  expected = np.tanh(out["sequence_output"][:, 0].numpy() @ pooler.kernel.numpy()
                     + pooler.bias.numpy())
  np.testing.assert_allclose(out["pooled_output"], expected, atol=1e-5)


def test_padding_does_not_leak_into_real_positions():
  model = modeling.BertModel(CONFIG)
  f = features()
  changed = dict(f, input_ids=tf.where(f["input_mask"] == 0, 7, f["input_ids"]))
  a, b = model(f)["sequence_output"], model(changed)["sequence_output"]
  real = f["input_mask"].numpy().astype(bool)
  np.testing.assert_allclose(a.numpy()[real], b.numpy()[real], atol=1e-6)
  assert np.abs(a.numpy()[~real] - b.numpy()[~real]).max() > 1e-3


def test_mask_and_segments_default():
  model = modeling.BertModel(CONFIG)
  f = features()
  ids = f["input_ids"]
  full = model({"input_ids": ids, "input_mask": tf.ones_like(ids),
                "segment_ids": tf.zeros_like(ids)})["sequence_output"]
  np.testing.assert_allclose(model({"input_ids": ids})["sequence_output"], full, atol=1e-6)


def test_causal_attention_ignores_the_right():
  model = modeling.BertModel(CONFIG, causal=True)
  f = features()
  f = {"input_ids": f["input_ids"], "input_mask": tf.ones_like(f["input_ids"])}
  changed = dict(f, input_ids=tf.concat([f["input_ids"][:, :5], f["input_ids"][:, 5:] * 0 + 3],
                                        axis=1))
  a, b = model(f)["sequence_output"].numpy(), model(changed)["sequence_output"].numpy()
  np.testing.assert_allclose(a[:, :5], b[:, :5], atol=1e-6)
  assert np.abs(a[:, 5:] - b[:, 5:]).max() > 1e-3


def test_dropout_only_in_training():
  model = modeling.BertModel(CONFIG)
  f = features()
  np.testing.assert_array_equal(model(f)["sequence_output"], model(f)["sequence_output"])
  assert np.abs(model(f, training=True)["sequence_output"].numpy()
                - model(f)["sequence_output"].numpy()).max() > 1e-3


@pytest.fixture
def tf_random_generator():
  tf_keras.backend.experimental.enable_tf_random_generator()
  yield
  tf_keras.backend.experimental.disable_tf_random_generator()


@pytest.mark.parametrize("dtype,shape", [("bfloat16", [250, 4001]), ("float32", [7, 3, 5])])
def test_dropout_mask_rate_scale_and_gradient(tf_random_generator, dtype, shape):
  tf_keras.utils.set_random_seed(3)
  layer = modeling.Dropout(0.1, dtype=dtype)
  x = tf.ones(shape, dtype)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = layer(x, training=True)
  gradient = tape.gradient(y, x)
  dropped = (y.numpy() == 0).astype(np.float64)
  n = dropped.size
  if n > 1000:  # within 4.5 sigma of the rate (bfloat16 uniform samples dropped 0.1016 here)
    assert abs(dropped.mean() - 0.1) < 4.5 * math.sqrt(0.09 / n)
  np.testing.assert_allclose(tf.cast(y, tf.float32).numpy()[dropped == 0],
                             float(tf.cast(1 / 0.9, dtype)))
  np.testing.assert_array_equal(tf.cast(gradient, tf.float32).numpy(),
                                tf.cast(y, tf.float32).numpy())
  np.testing.assert_array_equal(layer(x, training=False), x)
  tf_keras.utils.set_random_seed(3)
  np.testing.assert_array_equal(modeling.Dropout(0.1, dtype=dtype)(x, training=True), y)


def gelu_tanh(x):
  """The original release's modeling.gelu, in float64."""
  return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


def gelu_tanh_grad(x):
  t = np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))
  return 0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * np.sqrt(2 / np.pi) * (1 + 3 * 0.044715 * x ** 2)


def gelu_erf(x):
  return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


def gelu_erf_grad(x):
  return 0.5 * (1 + np.vectorize(math.erf)(x / np.sqrt(2))) + x * np.exp(-0.5 * x ** 2) / np.sqrt(
      2 * np.pi)


def test_gelu_is_the_originals_tanh_form_and_gelu_exact_is_erf():
  x = np.linspace(-6, 6, 121)
  for name in ("gelu", "GELU", "gelu_new"):
    np.testing.assert_allclose(activations.get_activation(name)(x.astype(np.float32)), gelu_tanh(x),
                               atol=2e-6)
  np.testing.assert_allclose(activations.get_activation("gelu_exact")(x.astype(np.float32)),
                             gelu_erf(x), atol=2e-6)
  # The two forms part by up to ~5e-4 on [-6, 6]: tests at 1e-5 tell them apart.
  assert np.abs(gelu_tanh(x) - gelu_erf(x)).max() > 4e-4
  assert activations.get_activation("linear") is None and activations.get_activation("") is None
  with pytest.raises(ValueError, match="Unsupported activation"):
    activations.get_activation("gelu_fast")


@pytest.mark.parametrize("dtype,atol,grad_atol", [("float32", 2e-6, 1e-5),
                                                  ("bfloat16", 0.04, 0.04)])
@pytest.mark.parametrize("name,value,derivative", [("gelu", gelu_tanh, gelu_tanh_grad),
                                                   ("gelu_exact", gelu_erf, gelu_erf_grad)])
def test_training_gelu_is_the_same_function(name, value, derivative, dtype, atol, grad_atol):
  # Inputs out to |x| = 6; atol for bfloat16 is one bfloat16 step at |gelu(x)| ~ 6 (1/32). In
  # float32 the tanh form's derivative is 0 once tanh rounds to 1 (|x| > ~4.9, where it is ~4e-6),
  # as it is in the original's graph.
  x = np.linspace(-6, 6, 241)
  inference = activations.get_activation(name)
  training = activations.training_activation(inference)
  for fn in (inference, training):
    inputs = tf.cast(tf.constant(x, tf.float32), dtype)
    for run in (fn, tf.function(fn)):
      with tf.GradientTape() as tape:
        tape.watch(inputs)
        y = run(inputs)
      assert y.dtype == dtype
      grad = tf.cast(tape.gradient(y, inputs), tf.float32).numpy()
      np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), value(x), atol=atol)
      np.testing.assert_allclose(grad, derivative(x), atol=grad_atol)


def test_training_forward_without_dropout_matches_inference():
  """Training steps use faster forms of the same functions (the GELU): same outputs."""
  # Large weights put the GELU inputs where its forms differ (|x| of a few units); seeded, as
  # outputs of this size make the tolerance depend on the draw.
  tf_keras.utils.set_random_seed(0)
  config = BertConfig(**{**CONFIG.to_dict(), "hidden_dropout_prob": 0.0,
                         "attention_probs_dropout_prob": 0.0, "initializer_range": 1.0})
  model = modeling.BertPretrainer(config)
  f = features()
  training, inference = model(f, training=True), model(f, training=False)
  for key in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits"):
    np.testing.assert_allclose(training[key], inference[key], rtol=1e-5, atol=1e-5)


def test_mixed_bfloat16_matches_float32(bf16_policy):
  model = modeling.BertPretrainer(CONFIG)
  tf_keras.mixed_precision.set_global_policy("float32")
  reference = modeling.BertPretrainer(CONFIG)
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  for source, target in zip(model.variables, reference.variables):
    target.assign(source)
  assert all(v.dtype == tf.float32 for v in model.variables)
  f = features()
  out = tf.function(lambda x: model(x, training=False))(f)
  ref = reference(f)
  assert out["sequence_output"].dtype == tf.bfloat16
  assert out["mlm_logits"].dtype == tf.float32 and out["nsp_logits"].dtype == tf.float32
  for key in ("sequence_output", "pooled_output", "mlm_logits", "nsp_logits"):
    np.testing.assert_allclose(tf.cast(out[key], tf.float32), ref[key], atol=0.1)


def test_trains_under_a_distribution_strategy():
  strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
  with strategy.scope():
    model = modeling.BertPretrainer(CONFIG)
    optimizer = tf_keras.optimizers.SGD(0.1)
  assert model.variables[0].name == "bert/embeddings/word_embeddings:0"
  f = features()

  @tf.function
  def step(x):
    def replica_step(x):
      with tf.GradientTape() as tape:
        out = model(x, training=True)
        loss = tf.reduce_mean(out["mlm_logits"] ** 2) + tf.reduce_mean(out["nsp_logits"] ** 2)
      grads = tape.gradient(loss, model.trainable_variables)
      optimizer.apply_gradients(zip(grads, model.trainable_variables))
      return loss
    return strategy.run(replica_step, args=(x,))

  before = model.encoder.transformer_layers[0].query.kernel.numpy()
  assert np.isfinite(step(f).numpy())
  assert np.abs(model.encoder.transformer_layers[0].query.kernel.numpy() - before).max() > 0


def _with_attention(name):
  config = BertConfig.from_dict(CONFIG.to_dict())
  config.attention_implementation = name
  return config


def test_attention_implementations_share_variables_and_outputs():
  """The attention seam: each implementation has the original's variables under the original's
  names (a checkpoint loads into any), gives the same outputs, and keeps the object-graph paths
  of checkpoints written before the seam (transformer_layers/<i>/query)."""
  separate = modeling.BertModel(_with_attention("separate_qkv"))
  fused = modeling.BertModel(_with_attention("fused_qkv"))
  assert isinstance(fused.transformer_layers[0].attention, modeling.FusedQKVSelfAttention)
  assert type(separate.transformer_layers[0].attention) is modeling.SelfAttention  # pylint: disable=unidiomatic-typecheck
  assert [v.name for v in fused.variables] == [v.name for v in separate.variables]
  fused.set_weights(separate.get_weights())
  f = features()
  a, b = separate(f)["sequence_output"].numpy(), fused(f)["sequence_output"].numpy()
  np.testing.assert_allclose(a, b, atol=2e-6)
  # One matmul for query, key and value at inference: 2 fewer per layer.
  def matmuls(model):
    graph = tf.function(lambda x: model(x)).get_concrete_function(f).graph
    return sum(op.type == "MatMul" for op in graph.get_operations())
  assert matmuls(separate) - matmuls(fused) == 2 * CONFIG.num_hidden_layers
  keys = {name for name, _ in tf.train.list_variables(
      tf.train.Checkpoint(model=fused).write(os.path.join(tempfile.mkdtemp(), "ckpt")))}
  assert "model/transformer_layers/0/query/kernel/.ATTRIBUTES/VARIABLE_VALUE" in keys
  with pytest.raises(ValueError, match="attention_implementation"):
    modeling.BertModel(_with_attention("flash"))


def test_fused_attention_trains_as_the_original():
  """Training steps take the original's three matmuls: the same gradients to the last bit."""
  f = features()

  def gradients(model):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(model(f, training=True)["pooled_output"] ** 2)
    return tape.gradient(loss, model.trainable_variables)

  no_dropout = BertConfig.from_dict(dict(CONFIG.to_dict(), hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0))
  models = []
  for name in ("separate_qkv", "fused_qkv"):
    no_dropout.attention_implementation = name
    models.append(modeling.BertModel(no_dropout))
  models[1].set_weights(models[0].get_weights())
  for a, b in zip(gradients(models[0]), gradients(models[1])):
    np.testing.assert_array_equal(tf.convert_to_tensor(a), tf.convert_to_tensor(b))


def test_inference_gelu_fusion_is_the_same_function():
  """INFERENCE_GELU_FUSION="always": the inference GELU in one XLA pass, the same values; export
  traces keep tf.nn.gelu (unfused_inference_gelu)."""
  model = modeling.BertModel(CONFIG)
  f = features()
  expected = model(f)["sequence_output"].numpy()
  assert activations.INFERENCE_GELU_FUSION == "never"
  activations.INFERENCE_GELU_FUSION = "always"
  try:
    assert activations.inference_activation(activations.gelu) is activations.gelu_for_inference
    np.testing.assert_allclose(model(f)["sequence_output"].numpy(), expected, atol=1e-5)
    with activations.unfused_inference_gelu():
      assert activations.inference_activation(activations.gelu) is activations.gelu
    assert activations.inference_activation(activations.gelu) is activations.gelu_for_inference
  finally:
    activations.INFERENCE_GELU_FUSION = "never"

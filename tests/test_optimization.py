"""Our optimizer against the original's formula (bert/optimization.py), re-implemented in numpy."""
import re

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.training import optimization


def original_lr(step, init_lr, num_train_steps, num_warmup_steps):
  decayed = init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)
  if num_warmup_steps and step < num_warmup_steps:
    return init_lr * step / num_warmup_steps
  return decayed


def original_step(params, grads, m, v, step, init_lr, num_train_steps, num_warmup_steps,
                  bias_correction=False):
  """One update of the original AdamWeightDecayOptimizer after clip_by_global_norm(1.0); with
  bias_correction, Adam's step size sqrt(1 - b2^t) / (1 - b1^t) at step t = step + 1."""
  norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
  scale = 1.0 / max(norm, 1.0)
  lr = original_lr(step, init_lr, num_train_steps, num_warmup_steps)
  correction = np.sqrt(1 - 0.999 ** (step + 1)) / (1 - 0.9 ** (step + 1)) if bias_correction else 1
  for name in params:
    g = grads[name] * scale
    m[name] = 0.9 * m[name] + 0.1 * g
    v[name] = 0.999 * v[name] + 0.001 * g * g
    update = correction * m[name] / (np.sqrt(v[name]) + 1e-6)
    if not any(re.search(p, name) for p in ("LayerNorm", "layer_norm", "bias")):
      update = update + 0.01 * params[name]
    params[name] = params[name] - lr * update


def test_schedule_matches_original():
  schedule = optimization.WarmupLinearDecay(1e-3, num_train_steps=10, num_warmup_steps=4)
  for step in range(14):
    np.testing.assert_allclose(float(schedule(step)), original_lr(step, 1e-3, 10, 4), rtol=1e-6)
  no_warmup = optimization.WarmupLinearDecay(1e-3, num_train_steps=10, num_warmup_steps=0)
  assert float(no_warmup(0)) == pytest.approx(1e-3)


@pytest.mark.parametrize("bias_correction", [False, True])
def test_adamw_updates_match_original_formula(bias_correction):
  rng = np.random.RandomState(0)
  shapes = {"layer_0/dense/kernel": (3, 4), "layer_0/dense/bias": (4,),
            "layer_0/LayerNorm/gamma": (4,), "output/layer_norm/beta": (4,), "embeddings": (5, 3)}
  init = {name: rng.randn(*shape).astype(np.float32) for name, shape in shapes.items()}
  variables = [tf.Variable(value, name=name) for name, value in init.items()]
  opt = optimization.create_optimizer(1e-1, num_train_steps=6, num_warmup_steps=2,
                                      adam_bias_correction=bias_correction)
  params = {name: value.astype(np.float64) for name, value in init.items()}
  m = {name: np.zeros_like(p) for name, p in params.items()}
  v = {name: np.zeros_like(p) for name, p in params.items()}
  for step in range(8):
    # Large gradients on some steps so that global-norm clipping is exercised.
    grads = {name: (rng.randn(*shape) * (5.0 if step % 2 else 0.1)).astype(np.float32)
             for name, shape in shapes.items()}
    opt.apply_gradients([(tf.constant(grads[var.name[:-2]]), var) for var in variables])
    original_step(params, grads, m, v, step, 1e-1, 6, 2, bias_correction)
    for var in variables:
      np.testing.assert_allclose(var.numpy(), params[var.name[:-2]], rtol=2e-5, atol=1e-5,
                                 err_msg=f"{var.name} at step {step}")
  assert int(opt.iterations) == 8


def test_weight_decay_exclusion_list():
  opt = optimization.create_optimizer(1e-3, 10, 1)
  assert opt.do_use_weight_decay("bert/encoder/layer_0/intermediate/dense/kernel")
  assert not opt.do_use_weight_decay("bert/encoder/layer_0/output/LayerNorm/gamma")
  assert not opt.do_use_weight_decay("cls/predictions/output_bias")
  assert not opt.do_use_weight_decay("x/layer_norm/beta")


def test_lamb_takes_trust_ratio_steps():
  var = tf.Variable(np.full([4], 2.0, np.float32), name="dense/kernel")
  opt = optimization.create_optimizer(0.1, 100, 0, optimizer_type="lamb", weight_decay_rate=0.0)
  opt.apply_gradients([(tf.constant([1.0, -1.0, 1.0, -1.0]), var)])
  # First step: m_hat = g, v_hat = g^2, so update = sign(g); trust ratio ||p|| / ||update|| = 2.
  np.testing.assert_allclose(var.numpy(), [1.8, 2.2, 1.8, 2.2], rtol=1e-5)


def test_bad_optimizer_type():
  with pytest.raises(BertTfError, match="--optimizer"):
    optimization.create_optimizer(1e-3, 10, 1, optimizer_type="sgd")


def test_config_round_trip_has_no_keras_weight_decay():
  opt = optimization.create_optimizer(1e-3, 10, 2, adam_bias_correction=True)
  again = optimization.AdamWeightDecay.from_config(
      opt.get_config(), custom_objects={"WarmupLinearDecay": optimization.WarmupLinearDecay})
  assert again.weight_decay is None and again.weight_decay_rate == 0.01
  assert again.bias_correction


def test_clip_counts_indexed_slices_rows_as_tf_clip_by_global_norm():
  """An IndexedSlices gradient (a gather's: one row per looked-up position, repeats included)
  counts row by row in the global norm, as TF1's tf.clip_by_global_norm counted it; its dense
  sum would give another norm (here a larger one: row 1 is looked up twice)."""
  rows = tf.IndexedSlices(tf.constant([[3.0, 0.0], [3.0, 0.0], [0.0, 4.0]]),
                          tf.constant([1, 1, 2]), tf.constant([3, 2]))
  dense = tf.constant([[0.0, 1.0, 2.0]])
  expected, norm = tf.clip_by_global_norm([rows, dense], 1.0)
  squared = optimization.squared_norm(rows) + optimization.squared_norm(dense)
  assert float(squared) == pytest.approx(9 + 9 + 16 + 5)
  assert float(norm) == pytest.approx(np.sqrt(39.0))
  clipped = optimization.clip_by_global_norm(
      [tf.convert_to_tensor(rows), dense], 1.0, squared)
  np.testing.assert_allclose(clipped[0], tf.convert_to_tensor(expected[0]), rtol=1e-6)
  np.testing.assert_allclose(clipped[1], expected[1], rtol=1e-6)
  dense_squared = optimization.squared_norm(tf.convert_to_tensor(rows)) + 5.0
  assert float(dense_squared) == pytest.approx(36 + 16 + 5)  # |3 + 3|^2: not the original's
  # Under the clip norm, nothing changes (and a zero norm divides nothing by zero).
  small = optimization.clip_by_global_norm([dense * 0.1], 1.0, tf.constant(0.05))
  np.testing.assert_allclose(small[0], dense * 0.1)
  zero = optimization.clip_by_global_norm([tf.zeros([2])], 1.0, tf.constant(0.0))
  np.testing.assert_array_equal(zero[0], [0.0, 0.0])


def test_clip_norm_rule_defaults_to_the_originals_on_the_device():
  assert optimization.resolve_clip_norm_rule(None, on_tpu=False) == "per_position"
  assert optimization.resolve_clip_norm_rule(None, on_tpu=True) == "dense"
  assert optimization.resolve_clip_norm_rule("dense", on_tpu=False) == "dense"
  assert optimization.clip_norm_rule_of_flag("original") is None
  assert optimization.clip_norm_rule_of_flag("per_position") == "per_position"
  with pytest.raises(BertTfError, match="--clip_norm_rule"):
    optimization.resolve_clip_norm_rule("rows", on_tpu=False)

"""The encoder benches time ONE forward pass per batch.

A step that calls the model once per output key runs two forward passes a batch, and every
figure it gives is off by 2x. These tests trace the benches'
own step functions on a tiny config and count their matmuls against one call of the model.
"""
# pylint: disable=g-import-not-at-top
import os
import sys

import pytest
import tensorflow as tf

from bert_tf.model.config import BertConfig
from bert_tf.model import modeling

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bench"))
import bench_encoder  # noqa: E402

TINY = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=24, max_position_embeddings=16, type_vocab_size=2)
_MATMULS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "_FusedMatMul")


def matmuls(concrete):
  """Matmul-like ops in a concrete function's graph, its nested functions included."""
  graph_def = concrete.graph.as_graph_def()
  nodes = list(graph_def.node)
  for function in graph_def.library.function:
    nodes += list(function.node_def)
  return sum(node.op in _MATMULS for node in nodes)


def one_call_matmuls(model, features):
  return matmuls(tf.function(lambda f: model(f, training=False)).get_concrete_function(features))


def test_counter_sees_a_doubled_step():
  """The check can fail: the old step (one model call per output key) has twice the matmuls."""
  model = modeling.BertModel(TINY)
  step = bench_encoder.tf_step(model, {"input_ids": tf.zeros([2, 8], tf.int32)}, False,
                               ["sequence_output"])
  doubled = tf.function(lambda f: [model(f, training=False)[k]
                                   for k in ("sequence_output", "pooled_output")])
  once = matmuls(step.function.get_concrete_function(step.features))
  assert matmuls(doubled.get_concrete_function(step.features)) == 2 * once
  # 2 layers x (4 dense + FFN in/out + 2 attention) + the pooler, whatever the QKV fusion.
  assert once >= 2 * 5 + 1


def test_ours_inference_step_runs_the_encoder_once():
  step = bench_encoder.ours("float32", False, config=TINY, batch_size=2, seq_length=8)
  model_matmuls = one_call_matmuls(modeling.BertModel(TINY), step.features)
  assert matmuls(step.function.get_concrete_function(step.features)) == model_matmuls
  sequence_output, pooled_output = step()
  assert sequence_output.shape == (2, 8, 16) and pooled_output.shape == (2, 16)


def test_model_garden_inference_step_runs_the_encoder_once():
  pytest.importorskip("official.nlp.modeling.networks")
  step = bench_encoder.garden("float32", False, config=TINY, batch_size=2, seq_length=8)
  from official.nlp.modeling.networks import BertEncoder
  reference = BertEncoder(vocab_size=TINY.vocab_size, hidden_size=16, num_layers=2,
                          num_attention_heads=2, intermediate_size=24, max_sequence_length=16,
                          type_vocab_size=2, dict_outputs=True)
  assert matmuls(step.function.get_concrete_function(step.features)) == one_call_matmuls(
      reference, step.features)


def test_the_matmul_ceiling_is_the_same_work_in_every_framework(monkeypatch):
  """bench_gemm.py (the ceiling beside bench_cpu_inference's peers): every peer chains the same
  products to the same result, and the FLOP count is the encoder's matmuls (4 per layer)."""
  import numpy as np
  import bench_gemm
  monkeypatch.setitem(bench_gemm.SIZES, "tiny", (2, 16, 24))
  rows = 8
  assert bench_gemm.flops("tiny", rows) == 2 * 2 * rows * (16 * 48 + 16 * 16 + 16 * 24 + 24 * 16)
  want = bench_gemm.numpy_worker("tiny", rows)()
  assert want.shape == (rows, 16) and np.abs(want).mean() > 0.1  # the scale kept near 1
  for name in ("tf", "tf_xla", "ort", "torch"):
    got = bench_gemm.build_worker(name, "tiny", rows)()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)

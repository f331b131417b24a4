"""The GELU forms inside a fused dense layer: MatMul + BiasAdd (+ GELU), float32, one tf.function.

Six [1024 x 768] x [768 x 3072] dense layers (BERT-Base's intermediate layer at 8 x 128 tokens)
with no activation, the exact (erf) GELU, the tanh GELU as tf.nn.gelu(approximate=True) (our
"gelu", the original's) and the tanh GELU written out op by op; medians of interleaved rounds.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_gelu_fusion.py

prints a table.
"""
import bench_env  # noqa: F401  (first: the environment every bench runs in)
import numpy as np
import tensorflow as tf

import harness

ROUNDS = 7
SQRT_2_OVER_PI = 0.7978845608028654


def dense_layers(activation):
  rng = np.random.RandomState(0)
  x = tf.constant(rng.randn(1024, 768).astype(np.float32))
  w = tf.constant(rng.randn(768, 3072).astype(np.float32) * 0.02)
  b = tf.constant(rng.randn(3072).astype(np.float32))

  @tf.function
  def run():
    total = 0.0
    for _ in range(6):
      total += tf.reduce_sum(activation(tf.nn.bias_add(tf.matmul(x, w), b)))
    return total

  return run


def main():
  forms = {
      "no activation": lambda t: t,
      "exact GELU, tf.nn.gelu(approximate=False)": lambda t: tf.nn.gelu(t, approximate=False),
      "tanh GELU, tf.nn.gelu(approximate=True)": lambda t: tf.nn.gelu(t, approximate=True),
      "tanh GELU written out": lambda t: 0.5 * t * (1.0 + tf.tanh(
          SQRT_2_OVER_PI * (t + 0.044715 * t * t * t))),
  }
  runs = {name: dense_layers(form) for name, form in forms.items()}
  times = harness.interleave({name: (lambda run=run: run().numpy()) for name, run in runs.items()},
                             ROUNDS, warmup=1)
  print("| dense layers (x6) | ms (median) |\n|---|---:|")
  for name, t in times.items():
    print(f"| {name} | {np.median(t) * 1000:.1f} |")


if __name__ == "__main__":
  harness.run(lambda _: main(), harness.Flags(), __doc__)

"""How fast this CPU trains the model in float32 and in bfloat16, measured: what --dtype=auto
decides by on a CPU with bfloat16 instructions (bert_tf.training.precision).

A CPU flag says bfloat16 instructions exist, not that TensorFlow's bfloat16 path is faster there:
on an Intel Xeon with avx512_bf16 (no AMX) BERT-Base trained at about 0.6x float32's speed in
bfloat16, on an AMD EPYC with avx512_bf16 at 1.33x. So the probe times one training step (forward
and backward) of one transformer layer of the model's sizes, in both precisions, alternating,
and keeps the medians. The result is cached per machine (CPU model and flags, TensorFlow version,
the layer's sizes) in ~/.cache/bert_tf/dtype_probe.json ($BERT_TF_CACHE_DIR instead of
~/.cache/bert_tf), so only a machine's first run pays the few seconds.

  timings(config, seq_length, cpuinfo) -> (float32 seconds, bfloat16 seconds, cached: bool)
"""
import json
import os
import statistics
import time

from absl import logging

# Tokens per probed step (batch x sequence): enough for the matmuls to run as in training.
PROBE_TOKENS = 512
ROUNDS = 3  # timed steps per precision, alternating, after one untimed each
CACHE_FILE = "dtype_probe.json"


def cache_path():
  directory = os.environ.get("BERT_TF_CACHE_DIR") or os.path.join(
      os.path.expanduser("~"), ".cache", "bert_tf")
  return os.path.join(directory, CACHE_FILE)


def cpu_model(cpuinfo):
  """The `model name` of /proc/cpuinfo's text ("" when it names none)."""
  for line in (cpuinfo or "").splitlines():
    key, _, value = line.partition(":")
    if key.strip() == "model name":
      return value.strip()
  return ""


def cache_key(config, seq_length, cpuinfo, flags):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return (f"{cpu_model(cpuinfo)} | {' '.join(flags or [])} | TensorFlow {tf.__version__} | "
          f"H={config.hidden_size} I={config.intermediate_size} A={config.num_attention_heads} "
          f"{config.hidden_act} T={seq_length}")


def timings(config, seq_length, cpuinfo, flags=None):
  """(float32 seconds, bfloat16 seconds) of one probed training step, and whether they came
  from the cache."""
  key = cache_key(config, seq_length, cpuinfo, flags)
  cached = _read_cache().get(key)
  if cached:
    return cached["float32"], cached["bfloat16"], True
  measured = measure(config, seq_length)
  entries = _read_cache()
  entries[key] = {"float32": measured[0], "bfloat16": measured[1]}
  _write_cache(entries)
  return measured[0], measured[1], False


def measure(config, seq_length, rounds=ROUNDS):
  """(float32, bfloat16) median seconds of a forward and backward step of one TransformerLayer
  of `config`'s sizes on PROBE_TOKENS tokens, the two alternating."""
  seq_length = max(1, min(seq_length, PROBE_TOKENS))
  batch_size = max(1, PROBE_TOKENS // seq_length)
  steps = {dtype: _step(config, batch_size, seq_length, policy)
           for dtype, policy in (("float32", "float32"), ("bfloat16", "mixed_bfloat16"))}
  for step in steps.values():
    step()  # traces
  seconds = {dtype: [] for dtype in steps}
  for _ in range(rounds):
    for dtype, step in steps.items():
      start = time.perf_counter()
      step()
      seconds[dtype].append(time.perf_counter() - start)
  return statistics.median(seconds["float32"]), statistics.median(seconds["bfloat16"])


def _step(config, batch_size, seq_length, policy):
  """A callable running one training step of one TransformerLayer under the Keras `policy`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  previous = tf_keras.mixed_precision.global_policy()
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    layer = modeling.TransformerLayer(config)
    layer.build()
  finally:
    tf_keras.mixed_precision.set_global_policy(previous)
  x = tf.random.stateless_normal([batch_size * seq_length, config.hidden_size], seed=[1, 2])
  adder = tf.zeros([batch_size, 1, 1, seq_length])

  @tf.function
  def step():
    with tf.GradientTape() as tape:
      y = layer(tf.cast(x, layer.compute_dtype), adder, batch_size, seq_length, training=True)
      loss = tf.reduce_mean(tf.cast(y, tf.float32) ** 2)
    grads = tape.gradient(loss, layer.trainable_variables)
    return tf.add_n([tf.reduce_sum(tf.cast(g, tf.float32)) for g in grads])

  return lambda: step().numpy()


def _read_cache():
  try:
    with open(cache_path(), encoding="utf-8") as f:
      entries = json.load(f)
    return entries if isinstance(entries, dict) else {}
  except (OSError, ValueError):
    return {}


def _write_cache(entries):
  """Best effort: a machine without a writable home measures again next time."""
  from bert_tf.io import fileio  # pylint: disable=g-import-not-at-top
  path = cache_path()
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fileio.write_text_atomically(path, json.dumps(entries, indent=1, sort_keys=True) + "\n")
  except OSError as e:
    logging.info("Could not cache the dtype probe in %s: %s", path, e)

"""How fast this CPU trains the model in float32 and in bfloat16, measured: what --dtype=auto
decides by on a CPU with bfloat16 instructions (bert_tf.training.precision).

A CPU flag says bfloat16 instructions exist, not that TensorFlow's bfloat16 path is faster there:
on an Intel Xeon with avx512_bf16 (no AMX) BERT-Base trained at about 0.6x float32's speed in
bfloat16, on an AMD EPYC with avx512_bf16 at 1.33x. So the probe times one training step (forward
and backward) of one transformer layer of the model's sizes, in both precisions, alternating,
and keeps the medians. The result is kept per machine (CPU model and flags, TensorFlow version,
the layer's sizes) among bert_tf.training.machine's measured choices, dtype_probe.json in its cache
directory, so only a machine's first run pays the few seconds.

  timings(config, seq_length, cpuinfo) -> (float32 seconds, bfloat16 seconds, cached: bool)
"""
import statistics

from bert_tf.training import machine

# Tokens per probed step (batch x sequence): enough for the matmuls to run as in training.
PROBE_TOKENS = 512
ROUNDS = 3  # timed steps per precision, alternating, after one untimed each
CACHE_KIND = "dtype_probe"


def choices():
  return machine.Choices(CACHE_KIND)


def cache_key(config, seq_length, cpuinfo, flags):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return {"cpu": machine.cpu(text=cpuinfo)["model"], "bf16_flags": list(flags or []),
          "tensorflow": tf.__version__,
          "layer": f"H={config.hidden_size} I={config.intermediate_size} "
                   f"A={config.num_attention_heads} {config.hidden_act} T={seq_length}"}


def timings(config, seq_length, cpuinfo, flags=None):
  """(float32 seconds, bfloat16 seconds) of one probed training step, and whether they came
  from the cache."""
  key, cache = cache_key(config, seq_length, cpuinfo, flags), choices()
  cached = cache.get(key, check=_measured)
  if cached:
    return cached["float32"], cached["bfloat16"], True
  measured = measure(config, seq_length)
  cache.put(key, {"float32": measured[0], "bfloat16": measured[1]})
  return measured[0], measured[1], False


def _measured(value):
  """Whether a cache entry is what timings keeps: seconds of both precisions."""
  return all(isinstance(value[name], (int, float)) and value[name] > 0
             for name in ("float32", "bfloat16"))


def measure(config, seq_length, rounds=ROUNDS):
  """(float32, bfloat16) median seconds of a forward and backward step of one TransformerLayer
  of `config`'s sizes on PROBE_TOKENS tokens, the two alternating."""
  seq_length = max(1, min(seq_length, PROBE_TOKENS))
  batch_size = max(1, PROBE_TOKENS // seq_length)
  steps = {dtype: _step(config, batch_size, seq_length, policy)
           for dtype, policy in (("float32", "float32"), ("bfloat16", "mixed_bfloat16"))}
  for step in steps.values():
    step()  # traces
  seconds = machine.time_in_turns(steps, rounds)
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

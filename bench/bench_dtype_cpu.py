"""float32 against bfloat16 on this CPU: a training step and an inference step of the whole
encoder, the two precisions taking turns, and what --dtype=auto picks here (its probe, measured
now). One row per model; a section in benchmarks/<date>.md with the CPU model and its flags.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_dtype_cpu.py --models=small,base \\
      --batch_size=4 --seq_length=128 --rounds=3

A training step is forward, backward and an SGD update of the encoder (mixed_bfloat16 keeps
float32 variables and casts them, as a --dtype=bfloat16 run does); an inference step is the
forward alone. Times are wall medians of --rounds alternating calls after one untimed call each.
"""
import statistics

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)

from absl import flags
from lib import harness
from lib.bench_configs import bert_config

FLAGS = flags.FlagValues()
flags.DEFINE_list("models", "small,base", "bench_configs models to time.", flag_values=FLAGS)
flags.DEFINE_integer("batch_size", 4, "Sequences per step.", flag_values=FLAGS)
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.", flag_values=FLAGS)
flags.DEFINE_integer("rounds", 3, "Timed calls per precision and step kind, alternating.",
                     flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the section to benchmarks/<date>.md.",
                     flag_values=FLAGS)

PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def steps(config, batch_size, seq_length, policy):
  """(train step, inference step) callables of the encoder of `config` under a Keras policy."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tf_keras  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  previous = tf_keras.mixed_precision.global_policy()
  tf_keras.mixed_precision.set_global_policy(policy)
  try:
    model = modeling.BertModel(config)
  finally:
    tf_keras.mixed_precision.set_global_policy(previous)
  ids = tf.random.stateless_uniform([batch_size, seq_length], [1, 2], maxval=config.vocab_size,
                                    dtype=tf.int32)
  features = {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}
  optimizer = tf_keras.optimizers.SGD(1e-4)

  @tf.function
  def train():
    with tf.GradientTape() as tape:
      outputs = model(features, training=True)
      loss = sum(tf.reduce_mean(tf.cast(outputs[name], tf.float32) ** 2)
                 for name in ("sequence_output", "pooled_output"))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    return loss

  @tf.function
  def infer():
    return tf.reduce_sum(tf.cast(model(features, training=False)["pooled_output"], tf.float32))

  return (lambda: train().numpy()), (lambda: infer().numpy())


def main(_):
  from bert_tf.training import machine  # pylint: disable=g-import-not-at-top
  from bert_tf.training import dtype_probe  # pylint: disable=g-import-not-at-top
  from bert_tf.training import precision  # pylint: disable=g-import-not-at-top
  args = FLAGS
  cpuinfo = machine.read_cpuinfo()
  flags = precision.cpu_bf16_flags(cpuinfo)
  rows = ["| model | batch x seq | train f32 ms | train bf16 ms | bf16 speed | infer f32 ms | "
          "infer bf16 ms | bf16 speed | probe bf16 speed | --dtype=auto picks |",
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
  for name in args.models:
    config = bert_config(name)
    built = {dtype: steps(config, args.batch_size, args.seq_length, policy)
             for dtype, policy in PRECISIONS.items()}
    train = harness.interleave({d: built[d][0] for d in PRECISIONS}, args.rounds)
    infer = harness.interleave({d: built[d][1] for d in PRECISIONS}, args.rounds)
    timings = dtype_probe.measure(config, args.seq_length)
    chosen = precision.choose("auto", "cpu", (), cpuinfo, timings if flags else None)[0]
    cells = []
    for samples in (train, infer):
      f32, bf16 = (1e3 * statistics.median(samples[d]) for d in PRECISIONS)
      cells += [f"{f32:,.0f}", f"{bf16:,.0f}", f"{f32 / bf16:.2f}x"]
    probe = f"{timings[0] / timings[1]:.2f}x"
    rows.append(f"| {name} | {args.batch_size} x {args.seq_length} | " + " | ".join(cells) +
                f" | {probe} | {chosen} |")
    print(rows[-1], flush=True)
  lead = (f"\n\n## float32 against bfloat16 on this CPU (bench/bench_dtype_cpu.py), "
          f"{harness.utc_now()}\n\n"
          f"Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_dtype_cpu.py "
          f"--models={','.join(args.models)} --batch_size={args.batch_size} "
          f"--seq_length={args.seq_length} --rounds={args.rounds}`  \n"
          f"Commit {harness.commit(note_dirty=True)}. {harness.machine_line()}.  \n"
          f"bfloat16 instructions: {' '.join(flags) if flags else 'none (emulated)'}. Wall-time "
          f"medians of {args.rounds} calls, the precisions alternating; speed = float32 time / "
          f"bfloat16 time (above 1: bfloat16 faster). The probe is --dtype=auto's (one "
          f"layer's training step); auto measures only on a CPU with bfloat16 instructions and "
          f"takes bfloat16 from {precision.MIN_BF16_SPEEDUP:.1f}x.\n\n")
  harness.publish(rows, append=args.append, lead=lead)


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

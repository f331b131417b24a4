"""Serving speed of the exported raw-text classifier (bert_tf/serving/export.py), from a Python client.

MiniLM-sized (L=6, H=384, A=12, I=1536) and BERT-Base-sized (L=12, H=768, A=12, I=3072) random
weights (V=30522, uncased vocab), exported as MRPC classifiers with max_seq_length 128 in float32
and bfloat16, then loaded with tf.saved_model.load and called through the serving signature on raw
MRPC dev pairs:
  * latency at batch 1 (p50, p90): one pair per call, real pairs (the graph runs on the call's own
    length) and pairs that fill all 128 tokens;
  * throughput at batch 32 (pairs / s), real pairs (each batch runs on its longest) and full 128.
The peer is the Python path of the same model: FullTokenizer + run_classifier's features
(padded to 128, as the original's predict) + a tf.function of the Keras model (bfloat16: the
mixed_bfloat16 policy run_classifier uses), the kind of client-side work the export removes. The
bfloat16 export stores its matmul weights in bfloat16 (same outputs as mixed_bfloat16, no
per-call cast). Peers take turns call by call.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_serving.py

prints a table and appends it to benchmarks/<date>.md.
"""
import os
import tempfile
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import numpy as np
import tensorflow as tf
import tf_keras

from bert_tf.serving import export
from bert_tf.tasks import glue
from bert_tf.text import tokenization
from bert_tf.training import runtime
from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("data_dir", bench_env.DATA, "The shared data (glue/MRPC, vocab/).",
                    flag_values=FLAGS)
flags.DEFINE_string("work_dir", None, "Where to write checkpoints and exports (default: a "
                    "temporary directory).", flag_values=FLAGS)
flags.DEFINE_integer("max_seq_length", 128, "The exported models' max_seq_length.",
                     flag_values=FLAGS)
flags.DEFINE_integer("latency_calls", 100, "Timed batch-1 calls per model and input kind "
                     "(BERT-Base: a quarter of it).", flag_values=FLAGS)
flags.DEFINE_integer("throughput_batches", 6, "Timed batch-32 calls per model and input kind "
                     "(BERT-Base: half of it).", flag_values=FLAGS)
flags.DEFINE_list("sizes", "minilm,base", "Model sizes to time (bench_configs.CONFIGS).",
                  flag_values=FLAGS)
flags.DEFINE_boolean("append", True, "Append the results to benchmarks/<date>.md.",
                     flag_values=FLAGS)

LABELS = ["0", "1"]
BATCH = 32


def size_config(size):
  return bench_configs.bert_config(size, max_position_embeddings=512)


def long_pairs(pairs, tokenizer, seq_length):
  """Pairs made longer (sentences repeated) until they fill seq_length tokens."""
  out = []
  for a, b in pairs:
    while len(tokenizer.tokenize(a)) + len(tokenizer.tokenize(b)) < seq_length:
      a, b = a + " " + a, b + " " + b
    out.append((a, b))
  return out


class PythonPeer:
  """run_classifier's Python path: FullTokenizer features padded to max_seq_length, the model."""

  def __init__(self, model, tokenizer, seq_length):
    self.tokenizer = tokenizer
    self.seq_length = seq_length
    self.call = tf.function(lambda x: tf.nn.softmax(model(x, training=False)["logits"]))

  def __call__(self, pairs):
    features = [glue.convert_single_example(9, glue.InputExample("x", a, b, "0"), LABELS,
                                            self.seq_length, self.tokenizer) for a, b in pairs]
    inputs = {name: tf.constant([getattr(f, name) for f in features], tf.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
    return self.call(inputs).numpy()


def served(signature):
  def call(pairs):
    outputs = signature(text_a=tf.constant([a for a, _ in pairs]),
                        text_b=tf.constant([b for _, b in pairs]))
    return outputs["probabilities"].numpy()
  return call


def time_calls(peers, requests):
  """{peer: [seconds per call]}, peers taking turns on each request (after two warm-up calls,
  on the first request and the last)."""
  for fn in peers.values():
    fn(requests[0])
    fn(requests[-1])
  calls = {name: (lambda fn=fn, each=iter(requests): fn(next(each)))
           for name, fn in peers.items()}
  return harness.interleave(calls, len(requests), warmup=0)


def main(_):
  logging_level = tf.get_logger().level
  tf.get_logger().setLevel("ERROR")
  vocab = os.path.join(FLAGS.data_dir, "vocab", "bert-base-uncased-vocab.txt")
  mrpc = glue.get_processor("mrpc").get_dev_examples(os.path.join(FLAGS.data_dir, "glue", "MRPC"))
  pairs = [(e.text_a, e.text_b) for e in mrpc]
  tokenizer = tokenization.FullTokenizer(vocab)
  seq = FLAGS.max_seq_length
  full_pairs = long_pairs(pairs[:BATCH], tokenizer, seq)
  real_lengths = [min(seq, 3 + len(tokenizer.tokenize(a)) + len(tokenizer.tokenize(b)))
                  for a, b in pairs]
  work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="bench_serving_")
  tf.random.set_seed(1)

  rows = []
  for size in FLAGS.sizes:
    config = size_config(size)
    model = export.build_model("classifier", config, num_labels=len(LABELS))
    checkpoint = os.path.join(work_dir, size)
    tf.train.Checkpoint(model=model).save(os.path.join(checkpoint, "ckpt"))
    peers_1, peers_32 = {}, {}
    for dtype in ("float32", "bfloat16"):
      start = time.perf_counter()
      export_dir = export.export("classifier", config, vocab, True, checkpoint,
                                 os.path.join(work_dir, f"{size}_{dtype}"), seq,
                                 label_list=LABELS, pair=True, dtype=dtype)
      print(f"exported {size} {dtype} in {time.perf_counter() - start:.1f} s", flush=True)
      signature = export.load(export_dir).signatures["serving_default"]
      peers_1[f"SavedModel {dtype}"] = served(signature)
      peers_32[f"SavedModel {dtype}"] = served(signature)
      previous = tf_keras.mixed_precision.global_policy()
      runtime.set_precision(dtype)
      python_model = export.build_model("classifier", config, num_labels=len(LABELS))
      tf_keras.mixed_precision.set_global_policy(previous)
      python_model.set_weights(model.get_weights())
      peers_1[f"Python path {dtype}"] = PythonPeer(python_model, tokenizer, seq)
      peers_32[f"Python path {dtype}"] = PythonPeer(python_model, tokenizer, seq)
    scale = 4 if size == "base" else 1
    n_latency = FLAGS.latency_calls // scale
    n_batches = max(2, FLAGS.throughput_batches // (2 if size == "base" else 1))
    kinds = {"MRPC pairs": pairs, "128-token pairs": full_pairs}
    for kind, kind_pairs in kinds.items():
      latency = time_calls(peers_1, [[kind_pairs[i % len(kind_pairs)]] for i in range(n_latency)])
      batches = [[kind_pairs[(b * BATCH + i) % len(kind_pairs)] for i in range(BATCH)]
                 for b in range(n_batches)]
      throughput = time_calls(peers_32, batches)
      for name in peers_1:
        t1 = np.array(latency[name]) * 1000
        t32 = np.array(throughput[name])
        rows.append(dict(size=size, kind=kind, peer=name, p50=float(np.percentile(t1, 50)),
                         p90=float(np.percentile(t1, 90)),
                         throughput=float(BATCH / np.median(t32)), n1=len(t1), n32=len(t32)))
        print(rows[-1], flush=True)
  tf.get_logger().setLevel(logging_level)
  report(rows, real_lengths)


def report(rows, real_lengths):
  now = harness.utc_now()
  lines = [
      f"## Serving the exported raw-text classifier (bench/bench_serving.py), {now}", "",
      "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_serving.py`  ",
      f"Machine: {harness.machine()}. MRPC classifiers exported by "
      f"bert_tf/serving/export.py (random weights, max_seq_length {FLAGS.max_seq_length}), loaded with "
      "tf.saved_model.load and called through `serving_default` on raw text pairs (tokenization "
      "in the graph). Peer: the Python path of the same weights (FullTokenizer + "
      "run_classifier's features padded to 128 + a tf.function of the Keras model; bfloat16: "
      "mixed_bfloat16, while the bfloat16 export stores its matmul weights in bfloat16, same "
      "outputs). Peers take turns call by call; other jobs share the 2 cores. MRPC dev pairs are "
      f"{np.mean(real_lengths):.0f} tokens on average (the SavedModel runs each call on its "
      "longest pair, the Python path on all 128); 128-token pairs fill the window.", "",
      "| model | inputs | peer | batch 1 p50 ms | batch 1 p90 ms | batch 32 pairs/s |",
      "|---|---|---|---:|---:|---:|"]
  for r in rows:
    lines.append(f"| {r['size']} | {r['kind']} | {r['peer']} | {r['p50']:.1f} | {r['p90']:.1f} | "
                 f"{r['throughput']:.1f} |")
  lines.append("")
  index = {(r["size"], r["kind"], r["peer"]): r for r in rows}
  for size in FLAGS.sizes:
    for kind in ("MRPC pairs", "128-token pairs"):
      for dtype in ("float32", "bfloat16"):
        ours, peer = index[(size, kind, f"SavedModel {dtype}")], index[(size, kind,
                                                                        f"Python path {dtype}")]
        lines.append(f"- {size}, {kind}, {dtype}: SavedModel / Python path: batch-1 p50 "
                     f"**{peer['p50'] / ours['p50']:.2f}x** faster, batch-32 throughput "
                     f"**{ours['throughput'] / peer['throughput']:.2f}x**")
      f32, bf16 = index[(size, kind, "SavedModel float32")], index[(size, kind,
                                                                     "SavedModel bfloat16")]
      lines.append(f"- {size}, {kind}: SavedModel bfloat16 / float32: batch-1 p50 "
                   f"**{f32['p50'] / bf16['p50']:.2f}x**, batch-32 throughput "
                   f"**{bf16['throughput'] / f32['throughput']:.2f}x**")
  if "minilm" in FLAGS.sizes:
    best = min(index[("minilm", "128-token pairs", f"SavedModel {d}")]["p50"]
               for d in ("float32", "bfloat16"))
    lines.append(f"- Target (MiniLM-sized, batch-1 p50 under 20 ms at seq 128, full 128-token "
                 f"pairs): best {best:.1f} ms: **{'met' if best < 20 else 'not met'}**")
  lines.append("")
  harness.publish(lines, FLAGS.append, lead="\n")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

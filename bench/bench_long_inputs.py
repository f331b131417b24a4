"""Batch-1 latency of the exported SQuAD model (bert_tf/serving/export.py) against the context's length.

A tiny model (L=2, H=32) and a MiniLM-sized one (L=6, H=384, A=12, I=1536; random weights, the
compute of the real MiniLM), exported at max_seq_length 384, doc_stride 128, max_query_length 64,
then loaded with tf.saved_model.load and called through serving_default with one question and a
context of N word pieces (Moby-Dick's opening, cut at N pieces): the context goes through every
doc_stride window, the span search over all of them, in the graph. Lengths take turns call by call;
the table gives median and p90 per call.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_long_inputs.py
"""
import os
import tempfile

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import numpy as np
import tensorflow as tf

from bert_tf.serving import export
from bert_tf.tasks import squad
from bert_tf.text import tokenization
from lib import bench_configs
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("data_dir", bench_env.DATA, "The shared data (corpus/gutenberg, vocab/).",
                    flag_values=FLAGS)
flags.DEFINE_list("lengths", "128,512,2048,8192", "Context lengths in word pieces.",
                  flag_values=FLAGS)
flags.DEFINE_list("sizes", "tiny,minilm", "Model sizes to time (bench_configs.CONFIGS).",
                  flag_values=FLAGS)
flags.DEFINE_integer("calls", 10, "Timed calls per size and length.", flag_values=FLAGS)

SEQ, STRIDE, QUERY = 384, 128, 64
QUESTION = "What did Ishmael do whenever he found himself growing grim about the mouth?"


def contexts(vocab, lengths):
  """Moby-Dick from its first chapter, cut at each length in word pieces (whole words)."""
  path = os.path.join(FLAGS.data_dir, "corpus", "gutenberg", "pg2701-moby_dick.txt")
  with open(path, encoding="utf-8-sig") as f:
    text = f.read()
  text = text[text.index("Call me Ishmael"):]
  tokenizer = tokenization.FullTokenizer(vocab)
  words, _ = squad.split_context(text[:200000])
  out, count, taken = {}, 0, []
  for word in words:
    count += len(tokenizer.tokenize(word))
    if count > max(lengths):
      break
    taken.append(word)
    for n in lengths:
      if n not in out and count >= n:
        out[n] = " ".join(taken)
  return out


def main(_):
  vocab = os.path.join(FLAGS.data_dir, "vocab", "bert-base-uncased-vocab.txt")
  lengths = [int(n) for n in FLAGS.lengths]
  texts = contexts(vocab, lengths)
  work = tempfile.mkdtemp()
  rows = []
  for size in FLAGS.sizes:
    config = bench_configs.bert_config(size, max_position_embeddings=512)
    tf.random.set_seed(1)
    model = export.build_model("squad", config)
    tf.train.Checkpoint(model=model).save(os.path.join(work, size, "ckpt"))
    path = export.export("squad", config, vocab, True, os.path.join(work, size),
                         os.path.join(work, size + "_export"), SEQ, max_query_length=QUERY,
                         doc_stride=STRIDE)
    serve = export.load(path).signatures["serving_default"]
    tokenize = export.load(path).signatures["tokenize"]
    windows = {}
    for n in lengths:  # the number of windows
      found = tokenize(question=tf.constant([QUESTION]), context=tf.constant([texts[n]]))
      windows[n] = int(found["input_ids"].shape[0])
    calls = {n: (lambda n=n: serve(question=tf.constant([QUESTION]),
                                   context=tf.constant([texts[n]]))["answer"].numpy())
             for n in lengths}
    times = harness.interleave(calls, FLAGS.calls, warmup=1)
    for n in lengths:
      ms = 1000 * np.array(times[n])
      rows.append(f"| {size} | {n} | {windows[n]} | {np.median(ms):.1f} | "
                  f"{np.percentile(ms, 90):.1f} |")
      print(rows[-1], flush=True)
  print("| model | context pieces | windows | median ms | p90 ms |\n|---|---|---|---|---|")
  print("\n".join(rows))


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

"""Batch-1 latency of the exported SQuAD model (bert_tf/export.py) against the context's length.

A tiny model (L=2, H=32) and a MiniLM-sized one (L=6, H=384, A=12, I=1536; random weights, the
compute of the real MiniLM), exported at max_seq_length 384, doc_stride 128, max_query_length 64,
then loaded with tf.saved_model.load and called through serving_default with one question and a
context of N word pieces (Moby-Dick's opening, cut at N pieces): the context goes through every
doc_stride window, the span search over all of them, in the graph. Lengths take turns call by call;
the table gives median and p90 per call.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_long_inputs.py
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bert_tf import export  # noqa: E402
from bert_tf import tokenization  # noqa: E402
from bert_tf.config import BertConfig  # noqa: E402
from bert_tf.tasks import squad  # noqa: E402

flags.DEFINE_string("data_dir", os.path.join(os.path.dirname(REPO), "shared", "data"),
                    "The shared data (corpus/gutenberg, vocab/).")
flags.DEFINE_list("lengths", "128,512,2048,8192", "Context lengths in word pieces.")
flags.DEFINE_list("sizes", "tiny,minilm", "Model sizes to time.")
flags.DEFINE_integer("calls", 10, "Timed calls per size and length.")
FLAGS = flags.FLAGS

SIZES = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37),
    "minilm": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                   intermediate_size=1536),
}
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
    config = BertConfig(vocab_size=30522, max_position_embeddings=512, type_vocab_size=2,
                        **SIZES[size])
    tf.random.set_seed(1)
    model = export.build_model("squad", config)
    tf.train.Checkpoint(model=model).save(os.path.join(work, size, "ckpt"))
    path = export.export("squad", config, vocab, True, os.path.join(work, size),
                         os.path.join(work, size + "_export"), SEQ, max_query_length=QUERY,
                         doc_stride=STRIDE)
    serve = export.load(path).signatures["serving_default"]
    tokenize = export.load(path).signatures["tokenize"]
    times = {n: [] for n in lengths}
    for n in lengths:  # warm-up, and the number of windows
      windows = tokenize(question=tf.constant([QUESTION]), context=tf.constant([texts[n]]))
      times[n].append(int(windows["input_ids"].shape[0]))
      serve(question=tf.constant([QUESTION]), context=tf.constant([texts[n]]))
    for _ in range(FLAGS.calls):
      for n in lengths:
        start = time.perf_counter()
        serve(question=tf.constant([QUESTION]), context=tf.constant([texts[n]]))["answer"].numpy()
        times[n].append(time.perf_counter() - start)
    for n in lengths:
      ms = 1000 * np.array(times[n][1:])
      rows.append(f"| {size} | {n} | {times[n][0]} | {np.median(ms):.1f} | "
                  f"{np.percentile(ms, 90):.1f} |")
      print(rows[-1], flush=True)
  print("| model | context pieces | windows | median ms | p90 ms |\n|---|---|---|---|---|")
  print("\n".join(rows))


if __name__ == "__main__":
  app.run(main)

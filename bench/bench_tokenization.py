# coding=utf-8
"""Tokenization throughput on the whole shared corpus, and id parity with the original.

Side by side: the original release's Python tokenizer (bert-tensorflow 1.0.4), our pure-Python
FullTokenizer, our tensorflow-text FastTokenizer (list API, and in-graph on a string tensor), and
Hugging Face `tokenizers` BertWordPieceTokenizer (same vocab and casing; its ids may differ).
Then, for every vocabulary, the number of lines whose ids differ from the original's.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_tokenization.py
"""
import glob
import os

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import bert.tokenization as original  # (the oracle; its absl flag: see harness.run)
import tensorflow as tf
import tokenizers

from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization
from lib import harness
from lib.harness import timed

FLAGS = flags.FlagValues()
flags.DEFINE_string("corpus_dir", os.path.join(bench_env.DATA, "corpus"), "Every line of every "
                    "file under it is tokenized.", flag_values=FLAGS)
flags.DEFINE_string("vocab_dir", os.path.join(bench_env.DATA, "vocab"), "Folder of the BERT "
                    "vocabularies.", flag_values=FLAGS)
flags.DEFINE_string("benchmarks_md", None, "Results are appended here.", flag_values=FLAGS)
flags.DEFINE_boolean("all_vocabs", True, "Also check parity with the cased and Chinese "
                     "vocabularies.", flag_values=FLAGS)

VOCABS = (("bert-base-uncased-vocab.txt", True), ("bert-base-cased-vocab.txt", False),
          ("bert-base-chinese-vocab.txt", True))


def read_corpus(corpus_dir):
  lines = []
  for path in sorted(glob.glob(os.path.join(corpus_dir, "**", "*"), recursive=True)):
    if os.path.isfile(path):
      with open(path, "rb") as reader:
        lines.extend(reader.read().decode("utf-8", "ignore").split("\n"))
  return lines


def count_mismatches(got, expected):
  return sum(1 for a, b in zip(got, expected) if a != b)


def original_ids(vocab_file, do_lower_case, lines):
  oracle = original.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  return [oracle.convert_tokens_to_ids(oracle.tokenize(line)) for line in lines]


def full_ids(vocab_file, do_lower_case, lines):
  full = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
  return [full.convert_tokens_to_ids(full.tokenize(line)) for line in lines]


def hugging_face_tokenizer(vocab_file, do_lower_case):
  return tokenizers.BertWordPieceTokenizer(
      vocab_file, lowercase=do_lower_case, strip_accents=do_lower_case, clean_text=True,
      handle_chinese_chars=True)


def hugging_face_ids(hf, lines):
  return [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)]


def throughput_rows(lines, vocab_file, do_lower_case):
  """(name, seconds, ids or None) for every peer on one vocabulary, and a note."""
  rows = []
  expected, seconds = timed(lambda: original_ids(vocab_file, do_lower_case, lines))
  rows.append(("original bert-tensorflow 1.0.4 (Python)", seconds, expected))

  _, table_seconds = timed(tokenization._python_patterns)  # pylint: disable=protected-access
  ids, seconds = timed(lambda: full_ids(vocab_file, do_lower_case, lines))  # empty word cache
  rows.append(("ours FullTokenizer (Python, word cache)", seconds, ids))

  fast, init_seconds = timed(
      lambda: fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case))
  fast.tokenize_to_ids(lines[:100])  # traces the tf.function once
  ids, seconds = timed(lambda: fast.tokenize_to_ids(lines))
  rows.append((f"ours FastTokenizer.tokenize_to_ids (batch {fast.batch_size})", seconds, ids))

  in_graph = tf.function(lambda texts: fast.ragged_ids(texts).flat_values,
                         input_signature=[tf.TensorSpec([None], tf.string)])
  texts = tf.constant(lines)
  in_graph(texts[:10])
  _, seconds = timed(lambda: in_graph(texts).numpy())
  rows.append(("ours FastTokenizer.ragged_ids in tf.function (one batch, tensors)", seconds, None))

  hf = hugging_face_tokenizer(vocab_file, do_lower_case)
  ids, seconds = timed(lambda: hugging_face_ids(hf, lines))
  rows.append(("HF tokenizers BertWordPieceTokenizer.encode_batch", seconds, ids))
  fast_batch = getattr(hf._tokenizer, "encode_batch_fast", None)  # pylint: disable=protected-access
  if fast_batch is not None:
    encodings, seconds = timed(lambda: fast_batch(lines, add_special_tokens=False))
    rows.append(("HF tokenizers encode_batch_fast (no offsets)", seconds,
                 [e.ids for e in encodings]))
  note = (f"One-time costs, not in the table: FullTokenizer's character tables "
          f"{table_seconds:.2f} s per process; FastTokenizer construction {init_seconds:.2f} s "
          f"(it compares TensorFlow's lower/NFD with Python's on every code point).")
  return rows, expected, note


def main(_):
  lines = read_corpus(FLAGS.corpus_dir)
  megabytes = sum(len(line.encode("utf-8")) for line in lines) / 1e6
  vocab_name, do_lower_case = VOCABS[0]
  rows, expected, note = throughput_rows(
      lines, os.path.join(FLAGS.vocab_dir, vocab_name), do_lower_case)
  tokens = sum(len(ids) for ids in expected)

  out = [f"Corpus: every line of {FLAGS.corpus_dir}: {len(lines):,} lines, {megabytes:.2f} MB "
         f"UTF-8, {tokens:,} WordPiece tokens ({vocab_name}, do_lower_case={do_lower_case}).", "",
         "| tokenizer | seconds | MB/s | tokens/s | x original | lines with ids != original |",
         "|---|---:|---:|---:|---:|---:|"]
  base = rows[0][1]
  for name, seconds, ids in rows:
    mismatches = "-" if ids is None else f"{count_mismatches(ids, expected):,}"
    out.append(f"| {name} | {seconds:.2f} | {megabytes / seconds:.2f} | {tokens / seconds:,.0f} "
               f"| {base / seconds:.1f} | {mismatches} |")
  fast_seconds = rows[2][1]
  hf_seconds = min(seconds for name, seconds, _ in rows if name.startswith("HF"))
  out += ["", f"FastTokenizer (list API) throughput / fastest HF tokenizers: "
          f"{hf_seconds / fast_seconds:.2f}x. " + note]

  if FLAGS.all_vocabs:
    out += ["", "Parity with the original on the whole corpus (lines whose ids differ):", "",
            "| vocabulary | do_lower_case | ours FullTokenizer | ours FastTokenizer "
            "| HF tokenizers |",
            "|---|---|---:|---:|---:|"]
    for vocab_name, do_lower_case in VOCABS:
      vocab_file = os.path.join(FLAGS.vocab_dir, vocab_name)
      want = (expected if vocab_name == VOCABS[0][0]
              else original_ids(vocab_file, do_lower_case, lines))
      fast = fast_tokenization.FastTokenizer(vocab_file, do_lower_case=do_lower_case)
      hf = hugging_face_tokenizer(vocab_file, do_lower_case)
      counts = [count_mismatches(full_ids(vocab_file, do_lower_case, lines), want),
                count_mismatches(fast.tokenize_to_ids(lines), want),
                count_mismatches(hugging_face_ids(hf, lines), want)]
      out.append(f"| {vocab_name} | {do_lower_case} | " + " | ".join(f"{c:,}" for c in counts)
                 + " |")

  report = "\n".join(out)
  print(report)
  harness.append_history(
      "\n## Tokenization throughput and parity (bench/bench_tokenization.py)\n\n"
      "Command: `flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_tokenization.py`  \n"
      f"Machine: {harness.machine()}. Date: {harness.utc_now()}. HF tokenizers runs on both "
      f"cores (rayon); TensorFlow uses its default thread pools.\n\n{report}\n",
      FLAGS.benchmarks_md)
  return 0


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

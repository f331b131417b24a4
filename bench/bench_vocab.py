# coding=utf-8
"""create_vocab's vocabularies against Hugging Face tokenizers' WordPiece trainer.

Each of our learners and HF learn from the same Gutenberg books (all but --held_out) at each size of --sizes (lines of
the file, special and [unused*] tokens included), in the same layout (bert_tf.text.vocab_learning's,
99 [unused*]); each is scored by our FullTokenizer on the held-out book: WordPiece pieces per
BasicTokenizer word and the [UNK] rate. HF tokenizers learns with its BertNormalizer and
BertPreTokenizer (the BasicTokenizer's rules) from the raw files, on both cores (rayon); ours
counts words (once for all sizes, one core) and then learns (one core). Prints a markdown table.

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_vocab.py
"""
import glob
import os
import tempfile

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags
import tokenizers

from bert_tf.text import tokenization
from bert_tf.text import vocab_learning
from lib import harness

FLAGS = flags.FlagValues()
flags.DEFINE_string("books", os.path.join(bench_env.DATA, "corpus", "gutenberg", "*.txt"),
                    "The books.", flag_values=FLAGS)
flags.DEFINE_string("held_out", "pg84-frankenstein", "The book (file name prefix) to score on.",
                    flag_values=FLAGS)
flags.DEFINE_list("sizes", ["8000", "30522"], "Vocabulary sizes (lines of the file).",
                  flag_values=FLAGS)
flags.DEFINE_list("learners", list(vocab_learning.LEARNERS), "Our learners to compare.",
                  flag_values=FLAGS)
flags.DEFINE_integer("repeats", 1, "Learning runs per learner and size (median time).",
                     flag_values=FLAGS)

NUM_UNUSED = vocab_learning.UNUSED_BEFORE_UNK


def learn_ours(word_counts, num_pieces, learner):
  pieces, _ = vocab_learning.learn_vocabulary(word_counts, num_pieces,
                                              excluded=vocab_learning.special_tokens(NUM_UNUSED),
                                              learner=learner, progress_seconds=None)
  return pieces


def learn_hugging_face(files, num_pieces):
  model = tokenizers.Tokenizer(tokenizers.models.WordPiece(unk_token="[UNK]"))
  model.normalizer = tokenizers.normalizers.BertNormalizer(
      clean_text=True, handle_chinese_chars=True, strip_accents=True, lowercase=True)
  model.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
  trainer = tokenizers.trainers.WordPieceTrainer(
      vocab_size=num_pieces, special_tokens=[], continuing_subword_prefix="##",
      show_progress=False)
  model.train(files, trainer)
  return [token for token, _ in sorted(model.get_vocab().items(), key=lambda item: item[1])]


def score(pieces, held_out_text, directory, name):
  """(lines of the file, pieces per word, [UNK] per word) of FullTokenizer on the text."""
  path = os.path.join(directory, name)
  lines = vocab_learning.special_tokens(NUM_UNUSED) + pieces
  with open(path, "w", encoding="utf-8") as f:
    f.write("".join(line + "\n" for line in lines))
  full = tokenization.FullTokenizer(path, do_lower_case=True)
  words = len(full.basic_tokenizer.tokenize(held_out_text))
  tokens = full.tokenize(held_out_text)
  return len(lines), len(tokens) / words, tokens.count("[UNK]") / words


def learn_all(counter, train, num_pieces):
  """{learner: (pieces, median seconds)}, learners interleaved over --repeats."""
  learners = {name: (lambda name=name: learn_ours(counter.counts, num_pieces, name))
              for name in vocab_learning.LEARNERS if name in FLAGS.learners}
  learners["hf"] = lambda: learn_hugging_face(train, num_pieces)
  pieces = {}
  times = harness.interleave(learners, FLAGS.repeats, warmup=0, results=pieces)
  return {name: (pieces[name], harness.summary(times[name])[0]) for name in learners}


def main(_):
  books = sorted(glob.glob(FLAGS.books))
  held_out = [path for path in books if os.path.basename(path).startswith(FLAGS.held_out)]
  train = [path for path in books if path not in held_out]
  if len(held_out) != 1 or not train:
    raise SystemExit(f"--held_out {FLAGS.held_out!r} must name one of {len(books)} books")
  with open(held_out[0], encoding="utf-8") as f:
    held_out_text = f.read()
  train_mb = sum(os.path.getsize(path) for path in train) / 1e6
  counter, count_seconds = harness.timed(
      lambda: vocab_learning.count_words(train, True, 5_000_000, None))
  out = [f"Learned on {len(train)} Gutenberg books ({train_mb:.1f} MB, {counter.total:,} words, "
         f"{len(counter.counts):,} distinct), scored on {os.path.basename(held_out[0])} "
         f"(do_lower_case=True, {NUM_UNUSED} [unused*]). Our learners count words first "
         f"({count_seconds:.1f} s, once for all sizes); HF's learn time includes its reading.", "",
         "| size | learner | lines | pieces / word | [UNK] / word | learn s | pieces / word vs HF |",
         "|---:|---|---:|---:|---:|---:|---:|"]
  with tempfile.TemporaryDirectory() as directory:
    for size in [int(size) for size in FLAGS.sizes]:
      num_pieces = size - len(vocab_learning.special_tokens(NUM_UNUSED))
      learned = learn_all(counter, train, num_pieces)
      scores = {name: score(pieces, held_out_text, directory, f"{name}.txt")
                for name, (pieces, _) in learned.items()}
      for name, (_, seconds) in learned.items():
        lines, per_word, unk = scores[name]
        label = (f"HF tokenizers {tokenizers.__version__} WordPieceTrainer" if name == "hf" else
                 f"bert_tf create_vocab --learner={name}")
        out.append(f"| {size:,} | {label} | {lines:,} | {per_word:.4f} | {unk:.5f} | "
                   f"{seconds:.1f} | {per_word / scores['hf'][1]:.4f} |")
  out.append(f"\nMachine: {harness.machine()}. Date: {harness.utc_now()}. "
             f"Commit: {harness.commit()}.")
  print("\n".join(out))


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

"""Learn a WordPiece vocabulary from raw text, for create_pretraining_data.py and a new model.

  python create_vocab.py --input_file=corpus/*.txt --output_file=vocab.txt --vocab_size=30522

Words are split exactly as the original's BasicTokenizer splits them (FullTokenizer then uses the
pieces as learned); the file has the original's layout: [PAD], [unused0] .. [unused98], [UNK],
[CLS], [SEP], [MASK], the rest of the --num_unused [unused*], --reserved_tokens, then the learned
pieces. See bert_tf/text/vocab_learning.py.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.text import vocab_learning  # noqa: E402


def define_flags():
  flags.DEFINE_string("input_file", None, "Raw text to learn from: comma-separated files or globs "
                      "(local or gs://...), any line layout.")
  flags.DEFINE_string("output_file", None, "Where to write the vocabulary, one token a line.")
  flags.DEFINE_bool("overwrite", False, "Replace --output_file if it exists (otherwise an "
                    "existing file is an error, checked before any work).")
  flags.DEFINE_integer("vocab_size", 30522, "Lines of the vocabulary, special, unused and reserved "
                       "tokens included (fewer if the corpus cannot fill them).")
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text (and strip "
                    "accents). Should be True for uncased models and False for cased models.")
  flags.DEFINE_integer("min_count", 1, "Learn only from words seen at least this many times.")
  flags.DEFINE_list("reserved_tokens", [], "Comma-separated tokens to put in the vocabulary "
                    "after the [unused*] slots, never learned over (e.g. markers for "
                    "fine-tuning). BasicTokenizer splits punctuation, so a token such as [E1] is "
                    "never produced from text: use it by id.")
  flags.DEFINE_integer("num_unused", vocab_learning.UNUSED_BEFORE_UNK, "[unused*] slots: the "
                       "first 99 before [UNK] (ids 1-99, [UNK] [CLS] [SEP] [MASK] at 100-103, as "
                       "the original), the rest right after [MASK]. The original uncased "
                       "vocabulary has 994.")
  flags.DEFINE_integer("max_unique_chars", 1000, "Alphabet size: words with a character outside "
                       "the most frequent ones are not learned from (those characters become "
                       "[UNK]). Raise it for Chinese or Japanese text.")
  flags.DEFINE_integer("max_words_in_memory", 5_000_000, "Bound of the word-count dict: past it "
                       "the rarest words are dropped until half remain (memory grows with it).")
  flags.DEFINE_enum("learner", "bpe", list(vocab_learning.LEARNERS), "bpe: byte-pair merges as "
                    "Hugging Face tokenizers' WordPieceTrainer; tensorflow_text: tensorflow-text's "
                    "WordPiece learner. Either is then cut to size by usage (bert_tf/text/"
                    "vocab_learning.py; bpe gives fewer pieces per word).")
  flags.DEFINE_integer("progress_seconds", 30, "Log progress this often.")
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  vocab_learning.run(bert_flags.options_of(vocab_learning.VocabOptions, bert_flags.values()))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input_file", "output_file")
  app.run(main)

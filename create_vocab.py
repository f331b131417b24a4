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
  bert_flags.define_flags(vocab_learning.VocabOptions)
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  vocab_learning.run(bert_flags.build(vocab_learning.VocabOptions, bert_flags.values()))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input_file", "output_file")
  app.run(main)

"""BERT named entity recognition on CoNLL-2003 (the paper's Tables 3 and 7): fine-tuning, or
frozen-BERT features into a BiLSTM with --feature_based. Scores are CoNLL entity-level F1."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import finetuning  # noqa: E402
from bert_tf.tasks import conll  # noqa: E402


def define_flags():
  bert_flags.define_finetuning_flags(conll.NerTask)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  options = bert_flags.finetune_options(conll.NerTask, bert_flags.values())
  finetuning.run(conll.NerTask, options)


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("data_dir", "output_dir")
  app.run(main)

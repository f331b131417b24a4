"""BERT named entity recognition on CoNLL-2003 (the paper's Tables 3 and 7): fine-tuning, or
frozen-BERT features into a BiLSTM with --feature_based. Scores are CoNLL entity-level F1."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.jobs import finetuning  # noqa: E402
from bert_tf.model import heads  # noqa: E402
from bert_tf.tasks import conll  # noqa: E402


def define_flags():
  flags.DEFINE_string("data_dir", None, "The input data dir, with train.txt, valid.txt and "
                      "test.txt in CoNLL column format (word first, NER tag last, IOB1 or IOB2).")
  bert_flags.define_model_flags()
  bert_flags.define_left_to_right_flag()
  bert_flags.define_bilstm_head_flags()
  bert_flags.define_finetuning_flags(max_seq_length_help="Longer sentences are split into "
                                     "windows, each word predicted in exactly one of them.")
  flags.DEFINE_bool("feature_based", False, "Freeze BERT and train a two-layer BiLSTM over "
                    "--feature_layers (the paper's feature-based approach) instead of "
                    "fine-tuning.")
  flags.DEFINE_enum("feature_layers", "concat_last_four", heads.FEATURE_LAYERS,
                    "With --feature_based: which BERT activations feed the BiLSTM.")
  flags.DEFINE_integer("lstm_units", 768, "With --feature_based: units per direction of each "
                       "BiLSTM layer.")
  bert_flags.define_export_flags()
  bert_flags.define_runtime_flags()
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  options = bert_flags.finetune_options(conll.NerTask, bert_flags.values())
  finetuning.run(conll.NerTask, options)


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("data_dir", "vocab_file", "bert_config_file", "output_dir")
  app.run(main)

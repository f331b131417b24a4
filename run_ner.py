"""BERT named entity recognition on CoNLL-2003 (the paper's Tables 3 and 7): fine-tuning, or
frozen-BERT features into a BiLSTM with --feature_based. Scores are CoNLL entity-level F1."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402

from bert_tf import cli  # noqa: E402
from bert_tf import common_flags  # noqa: E402
from bert_tf import export  # noqa: E402
from bert_tf import feature_extraction  # noqa: E402
from bert_tf import ner  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("data_dir", None, "The input data dir, with train.txt, valid.txt and "
                      "test.txt in CoNLL column format (word first, NER tag last, IOB1 or IOB2).")
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints, "
                      "eval_results.txt and test_predictions.txt will be written.")
  flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                      "BERT model): original TF1, one of ours, or a Hugging Face directory.")
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                    "for uncased models and False for cased models.")
  flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                       "WordPiece tokenization. Longer sentences are split into windows, each "
                       "word predicted in exactly one of them.")
  flags.DEFINE_bool("do_train", False, "Whether to run training on train.txt.")
  flags.DEFINE_bool("do_eval", False, "Whether to score valid.txt (eval_results.txt).")
  flags.DEFINE_bool("do_predict", False, "Whether to tag test.txt (test_predictions.txt, the "
                    "input columns plus the predicted tag, as conlleval reads; test_results.txt).")
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                     "learning rate warmup for. E.g., 0.1 = 10% of training.")
  flags.DEFINE_bool("feature_based", False, "Freeze BERT and train a two-layer BiLSTM over "
                    "--feature_layers (the paper's feature-based approach) instead of "
                    "fine-tuning.")
  flags.DEFINE_enum("feature_layers", "concat_last_four", feature_extraction.FEATURE_LAYERS,
                    "With --feature_based: which BERT activations feed the BiLSTM.")
  flags.DEFINE_integer("lstm_units", 768, "With --feature_based: units per direction of each "
                       "BiLSTM layer.")
  flags.DEFINE_string("export_dir", None, "If set, the fine-tuned model in output_dir is also "
                      "exported there as a SavedModel that takes raw text (export_savedmodel.py).")
  common_flags.define_runtime_flags()


def main(_):
  if FLAGS.export_dir and FLAGS.feature_based:
    raise BertTfError("--export_dir: not supported with --feature_based")
  ner.run(FLAGS)
  if FLAGS.export_dir:
    export.export_from_flags("ner", FLAGS, FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  for name in ("data_dir", "vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

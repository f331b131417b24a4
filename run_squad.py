"""Run BERT on SQuAD 1.1 and SQuAD 2.0, as the original's run_squad.py, with the official metric."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402

from bert_tf import cli  # noqa: E402
from bert_tf import common_flags  # noqa: E402
from bert_tf import export  # noqa: E402
from bert_tf import question_answering  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints will "
                      "be written.")
  flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
  flags.DEFINE_string("predict_file", None, "SQuAD json for predictions. E.g., dev-v1.1.json or "
                      "test-v1.1.json")
  flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                      "BERT model): original TF1, one of ours, or a Hugging Face directory.")
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                    "for uncased models and False for cased models.")
  flags.DEFINE_integer("max_seq_length", 384, "The maximum total input sequence length after "
                       "WordPiece tokenization. Sequences longer than this will be truncated, and "
                       "sequences shorter than this will be padded.")
  flags.DEFINE_integer("doc_stride", 128, "When splitting up a long document into chunks, how "
                       "much stride to take between chunks.")
  flags.DEFINE_integer("max_query_length", 64, "The maximum number of tokens for the question. "
                       "Questions longer than this will be truncated to this length.")
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  flags.DEFINE_bool("do_predict", False, "Whether to run eval on the dev set.")
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predictions.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                     "learning rate warmup for. E.g., 0.1 = 10% of training.")
  flags.DEFINE_integer("n_best_size", 20, "The total number of n-best predictions to generate in "
                       "the nbest_predictions.json output file.")
  flags.DEFINE_integer("max_answer_length", 30, "The maximum length of an answer that can be "
                       "generated. This is needed because the start and end predictions are not "
                       "conditioned on one another.")
  flags.DEFINE_bool("verbose_logging", False, "If true, all of the warnings related to data "
                    "processing will be printed. A number of warnings are expected for a normal "
                    "SQuAD evaluation.")
  flags.DEFINE_bool("version_2_with_negative", False, "If true, the SQuAD examples contain some "
                    "that do not have an answer.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0, "If null_score - best_non_null is greater "
                     "than the threshold predict null.")
  flags.DEFINE_bool("tune_null_threshold", False, "SQuAD 2.0 with a scored predict file: use the "
                    "null_score_diff_threshold that maximizes F1 on it (reported in "
                    "eval_results.json) instead of --null_score_diff_threshold.")
  flags.DEFINE_string("export_dir", None, "If set, the fine-tuned model in output_dir is also "
                      "exported there as a SavedModel that takes raw text (export_savedmodel.py).")
  common_flags.define_runtime_flags()


def main(_):
  question_answering.run(FLAGS)
  if FLAGS.export_dir:
    export.export_from_flags("squad", FLAGS, FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  for name in ("vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

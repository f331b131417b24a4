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
  flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
  flags.DEFINE_string("predict_file", None, "SQuAD json for predictions. E.g., dev-v1.1.json or "
                      "test-v1.1.json")
  common_flags.define_model_flags()
  common_flags.define_finetuning_flags(max_seq_length=384, with_eval=False)
  flags.DEFINE_integer("doc_stride", 128, "When splitting up a long document into chunks, how "
                       "much stride to take between chunks.")
  flags.DEFINE_integer("max_query_length", 64, "The maximum number of tokens for the question. "
                       "Questions longer than this will be truncated to this length.")
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
  common_flags.define_export_flag()
  common_flags.define_runtime_flags()
  flags.adopt_module_key_flags(common_flags)  # --helpshort lists the shared flags too


def main(_):
  question_answering.run(FLAGS)
  if FLAGS.export_dir:
    export.export_from_flags("squad", FLAGS, FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  for name in ("vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

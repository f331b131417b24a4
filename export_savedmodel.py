"""Exports a fine-tuned classifier, SQuAD or NER model as a SavedModel that takes raw text.

Tokenization (tensorflow-text, the same ids as FullTokenizer), truncation and post-processing run
in the graph: see bert_tf/export.py for the signatures. Clients `import tensorflow_text` before
tf.saved_model.load.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402

from bert_tf import cli  # noqa: E402
from bert_tf import export  # noqa: E402
from bert_tf import training  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_enum("task", None, list(export.TASKS), "Which fine-tuned model to export.")
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                    "for uncased models and False for cased models.")
  flags.DEFINE_string("init_checkpoint", None, "The fine-tuned model: the output_dir of "
                      "run_classifier.py / run_squad.py / run_ner.py, or a checkpoint prefix.")
  flags.DEFINE_string("task_name", None, "--task=classifier: the GLUE task the model was "
                      "fine-tuned on (its label names and whether it takes pairs).")
  flags.DEFINE_string("label_file", None, "--task=ner: the label list, one a line (default: "
                      "label_list.txt in --init_checkpoint, as run_ner.py writes it).")
  flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                       "WordPiece tokenization; longer inputs are truncated as in training.")
  flags.DEFINE_string("export_dir", None, "Where to write the SavedModel (replaced if present).")
  flags.DEFINE_enum("dtype", "float32", list(training.PRECISIONS),
                    "Compute precision of the exported model: float32, bfloat16 "
                    "(mixed_bfloat16, faster on CPUs with bf16 instructions, GPUs and TPUs) or float16.")
  flags.DEFINE_integer("max_query_length", 64, "--task=squad: questions are cut to this many "
                       "WordPiece tokens.")
  flags.DEFINE_integer("max_answer_length", 30, "--task=squad: the longest answer, in WordPiece "
                       "tokens.")
  flags.DEFINE_integer("n_best_size", 20, "--task=squad: the span is searched among this many "
                       "largest start and end logits, as run_squad.py; 0 searches all spans.")
  flags.DEFINE_bool("version_2_with_negative", False, "--task=squad: the model was trained on "
                    "SQuAD 2.0 and may answer that there is no answer.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0, "--task=squad with "
                     "--version_2_with_negative: no answer when null_score - best span score is "
                     "greater than this.")


def main(_):
  export.run(FLAGS)


if __name__ == "__main__":
  define_flags()
  for name in ("task", "bert_config_file", "vocab_file", "init_checkpoint", "export_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

"""BERT finetuning runner for GLUE and XNLI sequence(-pair) classification, as the original's."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402

from bert_tf import classification  # noqa: E402
from bert_tf import cli  # noqa: E402
from bert_tf import common_flags  # noqa: E402
from bert_tf import export  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("data_dir", None, "The input data dir. Should contain the .tsv files (or "
                      "other data files) for the task.")
  flags.DEFINE_string("bert_config_file", None, "The config json file corresponding to the "
                      "pre-trained BERT model. This specifies the model architecture.")
  flags.DEFINE_string("task_name", None, "The name of the task to train: cola, sst-2, mrpc, qqp, "
                      "sts-b, mnli, mnli-mm, qnli, rte, wnli or xnli.")
  flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
  flags.DEFINE_string("output_dir", None, "The output directory where the model checkpoints will "
                      "be written.")
  flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (usually from a pre-trained "
                      "BERT model): original TF1, one of ours, or a Hugging Face directory.")
  flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                    "for uncased models and False for cased models.")
  flags.DEFINE_integer("max_seq_length", 128, "The maximum total input sequence length after "
                       "WordPiece tokenization. Sequences longer than this will be truncated, and "
                       "sequences shorter than this will be padded.")
  flags.DEFINE_bool("do_train", False, "Whether to run training.")
  flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
  flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the test "
                    "set.")
  flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.")
  flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.")
  flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.")
  flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for Adam.")
  flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.")
  flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear "
                     "learning rate warmup for. E.g., 0.1 = 10% of training.")
  flags.DEFINE_string("export_dir", None, "If set, the fine-tuned model in output_dir is also "
                      "exported there as a SavedModel that takes raw text (export_savedmodel.py).")
  common_flags.define_runtime_flags()


def main(_):
  classification.run(FLAGS, task_kind="glue")
  if FLAGS.export_dir:
    export.export_from_flags("classifier", FLAGS, FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  for name in ("data_dir", "task_name", "vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

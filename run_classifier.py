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
  flags.DEFINE_string("task_name", None, "The name of the task to train: cola, sst-2, mrpc, qqp, "
                      "sts-b, mnli, mnli-mm, qnli, rte, wnli or xnli.")
  common_flags.define_model_flags()
  common_flags.define_finetuning_flags()
  common_flags.define_export_flag()
  common_flags.define_runtime_flags()
  flags.adopt_module_key_flags(common_flags)  # --helpshort lists the shared flags too


def main(_):
  classification.run(FLAGS, task_kind="glue")
  if FLAGS.export_dir:
    export.export_from_flags("classifier", FLAGS, FLAGS.output_dir)


if __name__ == "__main__":
  define_flags()
  for name in ("data_dir", "task_name", "vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

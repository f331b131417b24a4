"""BERT finetuning runner for SWAG multiple choice (train.csv, val.csv, test.csv in --data_dir)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402

from bert_tf import classification  # noqa: E402
from bert_tf import cli  # noqa: E402
from bert_tf import common_flags  # noqa: E402

FLAGS = flags.FLAGS


def define_flags():
  flags.DEFINE_string("data_dir", None, "The input data dir. Should contain the SWAG csv files "
                      "train.csv, val.csv and test.csv (regular or full format).")
  common_flags.define_model_flags()
  common_flags.define_finetuning_flags()
  common_flags.define_runtime_flags()
  flags.adopt_module_key_flags(common_flags)  # --helpshort lists the shared flags too


def main(_):
  classification.run(FLAGS, task_kind="swag")


if __name__ == "__main__":
  define_flags()
  for name in ("data_dir", "vocab_file", "bert_config_file", "output_dir"):
    flags.mark_flag_as_required(name)
  cli.run(main)

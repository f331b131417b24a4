"""BERT finetuning runner for SWAG multiple choice (train.csv, val.csv, test.csv in --data_dir)."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import finetuning  # noqa: E402
from bert_tf.tasks import swag  # noqa: E402


def define_flags():
  bert_flags.define_finetuning_flags(swag.SwagTask)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  options = bert_flags.finetune_options(swag.SwagTask, bert_flags.values())
  finetuning.run(swag.SwagTask, options)


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("data_dir", "output_dir")
  app.run(main)

"""Run BERT on SQuAD 1.1 and SQuAD 2.0, as the original's run_squad.py, with the official metric."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import finetuning  # noqa: E402
from bert_tf.tasks import squad  # noqa: E402


def define_flags():
  bert_flags.define_finetuning_flags(squad.SquadTask)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  options = bert_flags.finetune_options(squad.SquadTask, bert_flags.values())
  finetuning.run(squad.SquadTask, options)


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("output_dir")
  app.run(main)

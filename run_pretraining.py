"""Run masked LM/next sentence masked_lm pre-training for BERT."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import pretraining  # noqa: E402
from bert_tf.drivers.pretraining_options import PretrainingOptions  # noqa: E402
from bert_tf.training.options import RuntimeOptions  # noqa: E402
from bert_tf.training.options import TrainLoopOptions  # noqa: E402


def define_flags():
  bert_flags.define_flags(PretrainingOptions)
  bert_flags.define_flags(RuntimeOptions)
  bert_flags.define_flags(TrainLoopOptions)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  values = bert_flags.values()
  pretraining.run(bert_flags.build(PretrainingOptions, values),
                  bert_flags.build(RuntimeOptions, values),
                  bert_flags.build(TrainLoopOptions, values))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input_file", "output_dir")
  app.run(main)

"""Exports a fine-tuned classifier, SQuAD or NER model as a SavedModel that takes raw text.

Tokenization (tensorflow-text, the same ids as FullTokenizer), truncation and post-processing run
in the graph: see bert_tf/tasks/servers.py for the signatures. Clients `import tensorflow_text` before
tf.saved_model.load.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.io import progress  # noqa: E402
from bert_tf.serving import export  # noqa: E402
from bert_tf.tasks import base  # noqa: E402


def define_flags():
  flags.DEFINE_enum("task", None, export.task_names(), "Which fine-tuned model to export.")
  bert_flags.define_model_flags()
  flags.DEFINE_string("task_name", None, "--task=classifier: the GLUE task the model was "
                      "fine-tuned on (its label names and whether it takes pairs).")
  flags.DEFINE_string("label_file", None, "--task=ner: the label list, one a line (default: "
                      "label_list.txt in --init_checkpoint, as run_ner.py writes it).")
  bert_flags.define_max_seq_length_flag(128, "Longer inputs are truncated as in training.")
  bert_flags.define_export_flags(with_dtype=True)
  bert_flags.define_squad_flags()
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  values = bert_flags.values()
  path = export.run(bert_flags.export_options(values, base.for_export(values.task)))
  progress.summary("Finished", [("SavedModel", path)])


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("task", "bert_config_file", "vocab_file", "init_checkpoint",
                           "export_dir")
  app.run(main)

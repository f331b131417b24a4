"""Exports a fine-tuned model of a registered task (glue, squad, ner, ...) as a SavedModel that takes
raw text.

Tokenization (tensorflow-text, the same ids as FullTokenizer), truncation and post-processing run
in the graph: see each task's server (bert_tf/tasks/text_server.py) for the signatures. Clients
`import tensorflow_text` before tf.saved_model.load.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.io import progress  # noqa: E402
from bert_tf.drivers import exporting  # noqa: E402
from bert_tf.serving import guard  # noqa: E402
from bert_tf.tasks import base  # noqa: E402


def define_flags():
  tasks = [base.get(name) for name in base.export_names()]
  older = ", ".join(f"{alias} for {task.name}" for task in tasks for alias in task.aliases)
  # Its values are the registered tasks', which no field can name before they are found.
  flags.DEFINE_enum("task", None, base.export_names(aliases=True), "Which fine-tuned model to "
                    "export: the task of the run script that trained it"
                    f"{f' (older names: {older})' if older else ''}.")
  bert_flags.define_export_flags(tasks)  # and each task's own (--task_name, --label_file, ...)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  values = bert_flags.values()
  task = base.for_export(values.task)
  path = exporting.run(task, bert_flags.export_options(values, task))
  progress.summary("Finished", [("SavedModel", path)], figures=guard.figures(path))


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("task", "init_checkpoint", "export_dir")
  app.run(main)

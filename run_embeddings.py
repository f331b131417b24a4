"""Fine-tunes sentence embeddings: a bi-encoder on STS-B's scored pairs (cosine or CoSENT loss) or
on positive pairs with in-batch negatives (multiple negatives ranking), as sentence-transformers'
recipes train one; STS-B dev Spearman as its metric; --export_dir serves texts -> unit vectors."""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.drivers import finetuning  # noqa: E402
from bert_tf.tasks import embeddings  # noqa: E402


def define_flags():
  bert_flags.define_finetuning_flags(embeddings.EmbeddingTask)
  flags.adopt_module_key_flags(bert_flags)  # --helpshort lists the shared flags too


def main(_):
  options = bert_flags.finetune_options(embeddings.EmbeddingTask, bert_flags.values())
  finetuning.run(embeddings.EmbeddingTask, options)


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("output_dir")
  app.run(main)

"""Asks an exported classifier SavedModel about sentences given on the command line.

A client needs TensorFlow and tensorflow_text (which registers the in-graph tokenizer ops), not
bert_tf: usage `python demo/ask.py --export_dir=demo_out/export "a sentence" ["another"]`; for a
pair task (MRPC, MNLI, ...) give each pair as "first sentence ||| second sentence".
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the tokenizer ops the SavedModel uses)

flags.DEFINE_string("export_dir", None, "A SavedModel written by export_savedmodel.py --task=classifier.")
FLAGS = flags.FLAGS


def newest_version(export_dir):
  """export_dir/<highest version number> (export_savedmodel.py writes one per export, as TF
  Serving expects), or export_dir itself when it is a SavedModel."""
  if tf.io.gfile.exists(os.path.join(export_dir, "saved_model.pb")):
    return export_dir
  numbered = [int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir)
              if name.rstrip("/").isdigit()]
  if not numbered:
    raise app.UsageError(f"--export_dir: {export_dir} holds no SavedModel")
  return os.path.join(export_dir, str(max(numbered)))


def main(argv):
  sentences = argv[1:]
  if not sentences:
    raise app.UsageError("give at least one sentence to classify")
  serve = tf.saved_model.load(newest_version(FLAGS.export_dir)).signatures["serving_default"]
  inputs = {"text_a": tf.constant(sentences)}
  if "text_b" in serve.structured_input_signature[1]:  # a pair task: "first ||| second"
    pairs = [sentence.split(" ||| ", 1) + [""] for sentence in sentences]
    inputs = {"text_a": tf.constant([p[0] for p in pairs]),
              "text_b": tf.constant([p[1] for p in pairs])}
  serve(**inputs)  # the first call traces; time the second
  start = time.perf_counter()
  outputs = serve(**inputs)
  elapsed_ms = (time.perf_counter() - start) * 1e3
  for i, sentence in enumerate(sentences):
    label = outputs["labels"][i].numpy().decode()
    probabilities = ", ".join(f"{p:.3f}" for p in outputs["probabilities"][i].numpy())
    print(f"{sentence!r} -> label {label} (probabilities {probabilities})")
  print(f"({elapsed_ms:.1f} ms for {len(sentences)} sentence(s))")


if __name__ == "__main__":
  flags.mark_flag_as_required("export_dir")
  app.run(main)

"""Asks an exported classifier SavedModel about sentences given on the command line.

A client needs TensorFlow and tensorflow_text (which registers the in-graph tokenizer ops), not
bert_tf: usage `.venv/bin/python demo/ask.py --export_dir=demo_out/export "a sentence" ["another"]`;
for a pair task (MRPC, MNLI, ...) give each pair as "first sentence ||| second sentence".
--label_names names the task's labels in the output (the demo's SST-2 labels 0 and 1: negative,
positive); --vocab_file (the export's vocabulary) adds how many of the words are whole words of
it, spelled in pieces, or [UNK] (a character it does not have).
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import time  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (registers the tokenizer ops the SavedModel uses)

flags.DEFINE_string("export_dir", None, "A SavedModel written by export_savedmodel.py --task=glue.")
flags.DEFINE_list("label_names", None, "Names of the labels, in the task's label order "
                  "(e.g. negative,positive for SST-2's 0,1).")
flags.DEFINE_string("vocab_file", None, "The export's vocab.txt: report the words it lacks.")
flags.DEFINE_bool("do_lower_case", True, "As the export was made (for --vocab_file).")
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


def word_coverage(vocab_file, sentences, lower_case=True):
  """[(words, whole words, [words spelled in pieces], [[UNK] words])] per sentence: words as
  BERT's basic tokenizer splits them (punctuation apart), looked up in vocab_file by WordPiece;
  a word in pieces as `song ##s`."""
  tokenizer = tensorflow_text.BertTokenizer(vocab_file, lower_case=lower_case,
                                            token_out_type=tf.string, unknown_token="[UNK]")
  counts = []
  for words in tokenizer.tokenize(tf.constant(sentences)).to_list():  # [sentence][word][piece]
    words = [" ".join(piece.decode() for piece in pieces) for pieces in words]
    unknown = [word for word in words if "[UNK]" in word]
    split = [word for word in words if " " in word and word not in unknown]
    counts.append((len(words), len(words) - len(unknown) - len(split), split, unknown))
  return counts


def label_name(label, label_names):
  """label (a task's label, "0") as named by --label_names, in the order of the task's labels."""
  if not label_names:
    return label
  return f"{label_names[int(label)]} ({label})" if label.isdigit() and int(label) < len(
      label_names) else label


def answer_line(sentence, label, probabilities):
  """`'sentence' -> label (probabilities 0.063, 0.937)`: what ask prints (demo/summary.py reads
  it back)."""
  return f"{sentence!r} -> {label} (probabilities {', '.join(f'{p:.3f}' for p in probabilities)})"


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
  coverage = word_coverage(FLAGS.vocab_file, sentences, FLAGS.do_lower_case) if (
      FLAGS.vocab_file) else None
  for i, sentence in enumerate(sentences):
    label = label_name(outputs["labels"][i].numpy().decode(), FLAGS.label_names)
    print(answer_line(sentence, label, outputs["probabilities"][i].numpy()))
    if coverage:
      words, whole, split, unknown = coverage[i]
      print(f"  its {words} words and marks: {whole} in the vocabulary, {len(split)} spelled in "
            f"pieces{': ' + ', '.join(split) if split else ''}, {len(unknown)} [UNK]")
  print(f"({elapsed_ms:.1f} ms for {len(sentences)} sentence(s))")


if __name__ == "__main__":
  flags.mark_flag_as_required("export_dir")
  app.run(main)

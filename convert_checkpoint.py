"""Moves BERT weights between the original TF1 layout, our TF2 checkpoints, Hugging Face, TF Hub
(Kaggle) SavedModels and keras-hub presets.

  python convert_checkpoint.py --input=uncased_L-12_H-768_A-12/bert_model.ckpt \
    --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json --output=hf_dir --output_format=hf

The input format (tf1, tf2, hf, tfhub, keras_hub) is detected unless given; the output format
comes from --output_format, or is hf when --output ends in .safetensors or is a directory.

A student from its teacher's own layers (bert_tf.model.student; docs/distillation.md):

  python convert_checkpoint.py --input=teacher_output_dir --output=student/bert_model.ckpt \
    --student_layers=3          # or --teacher_layers=0,2,4
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from bert_tf.cli import app  # noqa: E402

app.catch_startup_signals()  # Ctrl-C while TensorFlow loads: one line, not a traceback

from absl import flags  # noqa: E402

from bert_tf.cli import flags as bert_flags  # noqa: E402
from bert_tf.errors import BertTfError  # noqa: E402
from bert_tf.io import fileio  # noqa: E402
from bert_tf.io import progress  # noqa: E402
from bert_tf.model import checkpoints  # noqa: E402
from bert_tf.model import student  # noqa: E402


def define_flags():
  flags.DEFINE_string("input", None, "Checkpoint to read: a TF checkpoint prefix or directory, "
                      "a Hugging Face directory / model.safetensors, a TF Hub (Kaggle) BERT "
                      "SavedModel directory or a keras-hub preset directory.")
  flags.DEFINE_string("output", None, "Where to write: a checkpoint prefix (tf1, tf2), a "
                      "directory / .safetensors file (hf), a new directory (tfhub: its encoder/ "
                      "and preprocess/ SavedModels; keras_hub: a preset).")
  bert_flags.define_bert_config_flag()
  flags.DEFINE_enum("input_format", None, checkpoints.FORMATS, "Format of --input (detected when "
                    "not given). --bert_config_file is optional for a Hugging Face input that has "
                    "its config.json.")
  flags.DEFINE_enum("output_format", None, checkpoints.FORMATS, "Format of --output.")
  flags.DEFINE_boolean("do_lower_case", None, "The casing a tfhub or keras_hub output records "
                       "(its preprocessing and tokenizer lower-case the text, or not); default: "
                       "--input's own (a TF Hub module's, a keras-hub preset's, a Hugging Face "
                       "tokenizer_config.json's), else True.")
  bert_flags.define_vocab_file_flag("The vocabulary to write beside --output as vocab.txt (a "
                                    "complete model directory); default: the vocab.txt beside "
                                    "--input, if there is one.")
  flags.DEFINE_integer("student_layers", None, "Write a student of this many layers instead: "
                       "every k-th layer of --input's encoder (k = its layers // this; 6 -> 3 "
                       "takes 0, 2, 4), its embeddings, pooler and heads as they are, as a TF1 "
                       "checkpoint with bert_config.json (num_hidden_layers set) and vocab.txt "
                       "beside it. --bert_config_file defaults to the bert_config.json beside "
                       "--input (a run's output_dir).")
  flags.DEFINE_string("teacher_layers", None, "As --student_layers, naming the layers of --input "
                      "to keep, in the student's order, e.g. 0,2,4.")
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  values = bert_flags.values()
  fileio.check_checkpoint_not_input(values.output, [("--input", values.input), (
      "--bert_config_file", values.bert_config_file), ("--vocab_file", values.vocab_file)])
  if values.student_layers is not None or values.teacher_layers is not None:
    if values.output_format not in (None, "tf1"):
      raise BertTfError("--output_format: a student is written as tf1 (leave it out)")
    written, layers = student.write_student(
        values.input, values.output, values.student_layers, values.teacher_layers,
        values.bert_config_file, values.vocab_file, values.input_format)
    progress.summary("Finished", [("student of layers " + ",".join(map(str, layers)),
                                   values.input), ("checkpoint", written)])
    print(f"wrote {written}")
    return
  written = checkpoints.convert_checkpoint(values.input, values.output, values.bert_config_file,
                                           values.input_format, values.output_format,
                                           values.vocab_file, values.do_lower_case)
  progress.summary("Finished", [("converted", values.input), ("checkpoint", written)])
  print(f"wrote {written}")


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input", "output")
  app.run(main)

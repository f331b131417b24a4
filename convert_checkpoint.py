"""Moves BERT weights between the original TF1 layout, our TF2 checkpoints and Hugging Face.

  python convert_checkpoint.py --input=uncased_L-12_H-768_A-12/bert_model.ckpt \
    --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json --output=hf_dir --output_format=hf

The input format (tf1, tf2, hf) is detected unless given; the output format comes from
--output_format, or is hf when --output ends in .safetensors or is a directory.

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
from bert_tf.model.model_options import ConvertOptions  # noqa: E402
from bert_tf.model import student  # noqa: E402


def define_flags():
  bert_flags.define_flags(ConvertOptions)
  flags.adopt_module_key_flags(bert_flags)


def main(_):
  options = bert_flags.build(ConvertOptions, bert_flags.values())
  fileio.check_checkpoint_not_input(options.output, [("--input", options.input), (
      "--bert_config_file", options.bert_config_file), ("--vocab_file", options.vocab_file)])
  if options.student_layers is not None or options.teacher_layers is not None:
    if options.output_format not in (None, "tf1"):
      raise BertTfError("--output_format: a student is written as tf1 (leave it out)")
    written, layers = student.write_student(
        options.input, options.output, options.student_layers, options.teacher_layers,
        options.bert_config_file, options.vocab_file, options.input_format)
    progress.summary("Finished", [("student of layers " + ",".join(map(str, layers)),
                                   options.input), ("checkpoint", written)])
    print(f"wrote {written}")
    return
  written = checkpoints.convert_checkpoint(options.input, options.output,
                                           options.bert_config_file, options.input_format,
                                           options.output_format, options.vocab_file)
  progress.summary("Finished", [("converted", options.input), ("checkpoint", written)])
  print(f"wrote {written}")


if __name__ == "__main__":
  define_flags()
  bert_flags.mark_required("input", "output")
  app.run(main)

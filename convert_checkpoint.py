"""Moves BERT weights between the original TF1 layout, our TF2 checkpoints and Hugging Face.

  python convert_checkpoint.py --input=uncased_L-12_H-768_A-12/bert_model.ckpt \
    --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json --output=hf_dir --output_format=hf

The input format (tf1, tf2, hf) is detected unless given; the output format comes from
--output_format, or is hf when --output ends in .safetensors or is a directory.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

from bert_tf import checkpoints  # noqa: E402
from bert_tf import cli  # noqa: E402

flags.DEFINE_string("input", None, "Checkpoint to read: a TF checkpoint prefix or directory, or a "
                    "Hugging Face directory / model.safetensors.")
flags.DEFINE_string("output", None, "Where to write: a checkpoint prefix (tf1, tf2) or a "
                    "directory / .safetensors file (hf).")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model. Optional for a "
                    "Hugging Face input that has its config.json.")
flags.DEFINE_enum("input_format", None, checkpoints.FORMATS, "Format of --input (detected when "
                  "not given).")
flags.DEFINE_enum("output_format", None, checkpoints.FORMATS, "Format of --output.")

FLAGS = flags.FLAGS


def main(_):
  logging.set_verbosity(logging.INFO)
  written = checkpoints.convert_checkpoint(FLAGS.input, FLAGS.output, FLAGS.bert_config_file,
                                           FLAGS.input_format, FLAGS.output_format)
  print(f"wrote {written}")


if __name__ == "__main__":
  flags.mark_flag_as_required("input")
  flags.mark_flag_as_required("output")
  cli.run(main)

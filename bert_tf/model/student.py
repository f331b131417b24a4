"""A student's first weights from its teacher's own layers, as DistilBERT starts its student.

No pretrained small BERT is at hand offline; a student of N layers can start instead from N of
its teacher's layers (every k-th one) with the teacher's embeddings, pooler and whatever else the
checkpoint holds outside the layers (a fine-tuned teacher's task head, a pretrained one's cls/
heads), copied as they are. convert_checkpoint.py --student_layers=N (or --teacher_layers=0,2,4)
writes that checkpoint as an original-layout TF1 checkpoint, with bert_config.json (the teacher's,
num_hidden_layers=N) and vocab.txt beside it, so that the student's run takes it as any model:
--bert_config_file, --vocab_file and --init_checkpoint all point into that directory.

Which layers (every_kth_layer): layer i*k of the teacher for i = 0..N-1, k = L // N, counted from
the bottom (6 layers -> 3: 0, 2, 4; -> 2: 0, 3; DistilBERT's 12 -> 6 takes every other one
likewise). --teacher_layers names them instead, in the student's order.
"""
import collections
import os
import re

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import checkpoints
from bert_tf.model.formats import tf_checkpoint
from bert_tf.model import model_files
from bert_tf.model.model_options import ModelOptions
from bert_tf.model.config import BertConfig

_LAYER = re.compile(r"^(bert/encoder/layer_)(\d+)(/.+)$")


def every_kth_layer(num_teacher_layers, num_student_layers):
  """The teacher layers a student of num_student_layers starts from (see the module docstring)."""
  if not 1 <= num_student_layers <= num_teacher_layers:
    raise BertTfError(f"--student_layers: expected 1 to {num_teacher_layers} (the teacher's "
                      f"layers), got {num_student_layers}")
  k = num_teacher_layers // num_student_layers
  return [i * k for i in range(num_student_layers)]


def parse_layers(text, num_teacher_layers, flag="--teacher_layers"):
  """`0,2,4` -> [0, 2, 4]: distinct layers of the teacher, in the student's order."""
  try:
    layers = [int(part) for part in text.split(",") if part.strip()]
  except ValueError:
    raise BertTfError(f"{flag}: expected comma-separated layer numbers such as 0,2,4, got "
                      f"{text!r}") from None
  bad = [i for i in layers if not 0 <= i < num_teacher_layers]
  if not layers or bad or len(set(layers)) != len(layers):
    raise BertTfError(f"{flag}: expected distinct layers of 0 to {num_teacher_layers - 1} (the "
                      f"teacher has {num_teacher_layers}), got {text!r}")
  return layers


def student_names(names, layers):
  """{student name: teacher name} for a checkpoint's variable names: layer layers[i] becomes
  layer i, the other layers are left out, every other variable keeps its name (training state
  aside: optimizer slots and step counters)."""
  source_of = {teacher: student for student, teacher in enumerate(layers)}
  mapping = collections.OrderedDict()
  for name in sorted(names):
    if checkpoints._is_training_state(name):  # pylint: disable=protected-access
      continue
    match = _LAYER.match(name)
    if match is None:
      mapping[name] = name
    elif int(match.group(2)) in source_of:
      mapping[f"{match.group(1)}{source_of[int(match.group(2))]}{match.group(3)}"] = name
  return mapping


def write_student(input_path, output, student_layers=None, teacher_layers=None,
                  bert_config_file=None, vocab_file=None, input_format=None):
  """Writes the student checkpoint (TF1 layout, prefix `output`) of a teacher checkpoint
  (input_path: a prefix, a run's output_dir, any format convert_checkpoint reads), with its
  bert_config.json and vocab.txt beside it. student_layers: a number of layers (every_kth_layer);
  teacher_layers: "0,2,4". Returns (output, the teacher layers taken)."""
  if (student_layers is None) == (teacher_layers is None):
    raise BertTfError("--student_layers/--teacher_layers: give one of them")
  files = model_files.open_model(ModelOptions(
      init_checkpoint=input_path, bert_config_file=bert_config_file, vocab_file=vocab_file),
      need_vocab=False, checkpoint_flag="--input")
  config, vocab_file = files.config, files.vocab_file
  source = checkpoints.open_checkpoint(input_path, input_format)
  total = config.num_hidden_layers
  layers = (every_kth_layer(total, student_layers) if teacher_layers is None else
            parse_layers(teacher_layers, total))
  mapping = student_names(source.shapes, layers)
  wanted = {f"bert/encoder/layer_{i}/" for i in range(len(layers))}
  if not any(name.startswith(tuple(wanted)) for name in mapping):
    raise BertTfError(f"--input: {source.path} holds no encoder layers (bert/encoder/layer_N/...)")
  student_config = BertConfig.from_dict(dict(config.to_dict(), num_hidden_layers=len(layers)))
  config_path = os.path.join(os.path.dirname(output) or ".", tf_checkpoint.CONFIG_FILE)
  if tf.io.gfile.exists(config_path) and BertConfig.from_json_file(config_path) != student_config:
    raise BertTfError(f"--output: {config_path} already describes another model: give a new "
                      f"directory")
  model_files.write_model_files(os.path.dirname(output) or ".", student_config, vocab_file)
  checkpoints.write_tf1_tensors(output, collections.OrderedDict(
      (name, np.asarray(source.read(teacher))) for name, teacher in mapping.items()))
  return output, layers

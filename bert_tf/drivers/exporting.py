"""The export as a job: export_savedmodel.py's whole run (run) and a run script's --export_dir
after training (export_from_options), from typed options to a new export version: float32 through
bert_tf.serving.export, a reduced precision (--dtype=bfloat16, --quantize) through
bert_tf.serving.reduced, which checks it against float32. Before either, an init_checkpoint that
is a fine-tuning run's output_dir must hold the task exported (check_task_config)."""
import dataclasses
import json
import os

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import model_files
from bert_tf.model.formats import sentence_transformers
from bert_tf.model.formats import tf_checkpoint
from bert_tf.serving import export
from bert_tf.serving import reduced
from bert_tf.tasks import base


def export_from_options(task, options, config, init_checkpoint, weights=None):
  """Exports `task` as the options say (an ExportOptions, or a run_*.py's FinetuneOptions after
  training, with its output_dir as init_checkpoint) for the model of `config` (its BertConfig,
  which the job checked options.max_seq_length against); `weights`: a checkpoint to load instead
  of init_checkpoint's (the best weights a run kept). A reduced precision (--dtype=bfloat16,
  --quantize) is exported and checked against float32 by bert_tf.serving.reduced."""
  serving = base.for_export(task, flag="--export_dir")
  server_options = serving.serving_options(options.task, init_checkpoint)
  if options.dtype != "float32" or options.quantize != "none":
    return reduced.write(serving, options, config, weights or init_checkpoint, server_options)
  return export.export(serving, config, options.vocab_file, options.do_lower_case,
                weights or init_checkpoint, options.export_dir, options.max_seq_length,
                tflite=options.tflite, dtype=options.dtype, **server_options)


def check_task_config(task, task_options, init_checkpoint):
  """When init_checkpoint is a fine-tuning run's output_dir (or a checkpoint in one), its
  task_config.json must name `task` (and agree with the task's own checks, e.g. a classifier's
  --task_name): a sentence classifier's head reads as a token tagger's, so a mismatch would
  export a model that serves nonsense."""
  directory = (init_checkpoint if tf.io.gfile.isdir(init_checkpoint)
               else os.path.dirname(init_checkpoint))
  path = os.path.join(directory or ".", tf_checkpoint.TASK_CONFIG_FILE)
  if not tf.io.gfile.exists(path):
    return
  with tf.io.gfile.GFile(path, "rb") as f:
    try:
      config = json.loads(f.read().decode("utf-8-sig"))
    except ValueError:
      config = None
  if not isinstance(config, dict):
    raise BertTfError(f"--init_checkpoint: {path} is not a task_config.json of bert_tf (a JSON "
                      f"object)")
  found, wanted = base.for_task_config(config), base.for_export(task)
  if found is not wanted:
    name, task_name = found.name if found else "unknown", config.get("task_name")
    given = task if isinstance(task, str) else wanted.name
    remedy = f"pass --task={name}" if found and found.server_class else "it cannot be exported"
    raise BertTfError(f"--task: {path} says {directory} holds a fine-tuned {name} model"
                      f"{f' ({task_name})' if task_name else ''}, not {given}: {remedy}")
  found.check_task_config(config, task_options, path, directory)


def run(task, options):
  """The whole of export_savedmodel.py for `task` (its --task) and its ExportOptions; returns the
  export directory."""
  files = model_files.open_model(options, max_seq_length=options.max_seq_length)
  check_task_config(task, options.task, options.init_checkpoint)
  options = dataclasses.replace(files.resolved(options), max_seq_length=(
      sentence_transformers.sequence_length(files.described, options.max_seq_length,
                                            options.given, files.config)))
  return export_from_options(task, options, files.config, options.init_checkpoint)

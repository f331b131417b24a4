"""Prediction from Python in one line: a fine-tuned model called on strings.

  from bert_tf.serving import predictor
  classify = predictor.load("mrpc_out")                  # run_classifier's output_dir, or
  classify = predictor.load("export_dir")                # an export (SavedModel / its versions)
  classify([("He said so.", "So he said.")])             # -> [{"label": "1", "score": 0.94,
                                                         #      "scores": {"0": 0.06, "1": 0.94}}]
  predictor.load("squad_out")(question="Who?", context="Anna met Tom.")
                                                         # -> [{"answer": "Anna", "score": 7.1,
                                                         #      "has_answer": True, ...}]
  predictor.load("ner_out")("EU rejects German call")    # -> [[("EU", "B-ORG"), ...]]

The predictor calls the very server an export holds (bert_tf.serving.export: the tokenization, the model
and the post-processing in one graph), batch_size inputs at a time, and turns its outputs into
Python values. From an export it calls the SavedModel's serving_default signature; from a
fine-tuning output_dir it builds the same server in memory (export.build_server, nothing written)
from the run's latest checkpoint and the files the run left there: task_config.json (written by
finetuning.run when training starts: write_task_config), bert_config.json and vocab.txt (or the
bert_config_file= / vocab_file= arguments of load()).

Results, one per input: a classifier gives {"label", "score" (its probability), "scores" (every
label's)}, a regression task (STS-B) {"score"}; SQuAD {"answer", "score", "has_answer",
"null_score_diff"} (the answer is "" where the model predicts none, see servers.SquadServer); NER a
list of (word, tag) pairs, the sentence split on whitespace. What a task's inputs and results are
is the registered task's (bert_tf.tasks.base: predictor_inputs, predictor_result).
"""
import json
import os

import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model.config import BertConfig
from bert_tf.model import model_dir
from bert_tf.serving import export
from bert_tf.tasks import base

TASK_CONFIG_FILE = model_dir.TASK_CONFIG_FILE


# ---------------------------------------------------------------------------- task_config.json


# ---------------------------------------------------------------------------- loading


def load(path, task=None, batch_size=32, bert_config_file=None, vocab_file=None,
         dtype="float32", backend="auto"):
  """A Predictor for an export directory (a SavedModel, or numbered versions of one: the newest)
  or a fine-tuning output_dir (with task_config.json; its latest checkpoint).

  task: "classifier", "squad" or "ner" to check that path holds that task (None: any).
  bert_config_file, vocab_file: for an output_dir without bert_config.json / vocab.txt copies.
  dtype: the output_dir's model's (float32, bfloat16 or float16; an export keeps its own).
  backend: "savedmodel" (the server's graph), or "tflite": the same server (tokenization, outputs
  and post-processing, any task) around the model run by TensorFlow Lite, faster on CPUs
  (BENCHMARKS.md, predictor). An export made with --tflite holds the model and what
  rebuilds its server; an output_dir's float32 model is converted on loading. "auto": tflite for
  an export that holds the file, else savedmodel.
  """
  if not isinstance(path, (str, os.PathLike)):
    raise TypeError(f"predictor.load: path should be a str or os.PathLike naming an export or a "
                    f"fine-tuning output_dir, got {type(path).__name__} {path!r}")
  path = os.fspath(path)
  if not tf.io.gfile.isdir(path):
    raise BertTfError(f"{path}: {'not a directory' if tf.io.gfile.exists(path) else 'not found'}"
                      f"; expected an export directory or a fine-tuning output_dir")
  if not isinstance(batch_size, int) or batch_size < 1:
    raise BertTfError(f"batch_size: expected a positive integer, got {batch_size!r}")
  if backend not in BACKENDS:
    raise BertTfError(f"backend: expected one of {', '.join(BACKENDS)}, got {backend!r}")
  if task is not None:
    task = base.for_export(task, flag="task").export_task
  if tf.io.gfile.exists(os.path.join(path, TASK_CONFIG_FILE)):
    backend = "tflite" if backend == "tflite" else "savedmodel"  # auto: no conversion unasked
    module = _server_from_output_dir(path, bert_config_file, vocab_file, dtype,
                                     tflite=backend == "tflite")
    serve = module.serve
  elif tf.io.gfile.exists(os.path.join(path, "saved_model.pb")) or export.versions(path):
    if backend == "auto":
      backend = "tflite" if export.has_tflite(path) else "savedmodel"
    if backend == "tflite":
      module = export.tflite_server(path)
      serve = module.serve
    else:
      module = export.load(path)
      serve = module.signatures["serving_default"]
  else:
    raise BertTfError(f"{path}: neither an export (saved_model.pb, or numbered versions of one) "
                      f"nor a fine-tuning output_dir ({TASK_CONFIG_FILE})")
  described = _describe(module, serve)
  loaded = Predictor(serve, batch_size=batch_size, module=module, backend=backend, **described)
  if task is not None and task != loaded.task:
    raise BertTfError(f"task: {path} holds a {loaded.task} model, not {task}")
  return loaded


BACKENDS = ("auto", "savedmodel", "tflite")


# The fields load() needs in task_config.json, and their types ("task", or "export_kind" in the
# files of runs before it: base.for_task_config).
_TASK_CONFIG_FIELDS = {"do_lower_case": bool, "max_seq_length": int}


def _read_task_config(path):
  """(the task_config.json of output_dir path, the registered task it names), checked."""
  config_path = os.path.join(path, TASK_CONFIG_FILE)
  try:  # UTF-8 only: UTF-16 or other bytes are a BertTfError naming the file (fileio.read_text)
    config = json.loads(fileio.read_text(config_path))
  except json.JSONDecodeError as e:
    raise BertTfError(f"{config_path}: not valid JSON ({e})") from None
  if not isinstance(config, dict):
    raise BertTfError(f"{config_path}: expected a JSON object (as finetuning writes it), got a "
                      f"{type(config).__name__}")
  fields = dict(_TASK_CONFIG_FIELDS, **({} if "task" in config else {"export_kind": str}))
  for field, kind in fields.items():
    if not isinstance(config.get(field), kind):
      found = "missing" if field not in config else f"a {type(config[field]).__name__}"
      raise BertTfError(f"{config_path}: field {field!r} should be a {kind.__name__}, is {found}")
  task = base.for_task_config(config)
  what = task and (task.unservable(config) if task.export_task else task.name)
  if task is None or what:
    what = what or config.get("task_name") or config.get("task") or config.get("export_kind")
    raise BertTfError(f"{config_path}: a {what} run; a predictor serves fine-tuned "
                      f"{', '.join(base.export_names())} models only")
  return config, task


def _server_from_output_dir(path, bert_config_file, vocab_file, dtype, tflite):
  """export.build_server for an output_dir's task_config.json and latest checkpoint (tflite: its
  model run by TensorFlow Lite)."""
  config, task = _read_task_config(path)
  files = {"bert_config_file": bert_config_file or os.path.join(path, model_dir.CONFIG_FILE),
           "vocab_file": vocab_file or os.path.join(path, model_dir.VOCAB_FILE)}
  missing = [f"{name}= ({files[name]} not found)" for name in files
             if not tf.io.gfile.exists(files[name])]
  if missing:
    raise BertTfError(f"{path}: give predictor.load {' and '.join(missing)}")
  # Only the options the file has (doc_stride: absent from the task_config.json of runs before
  # exports took long contexts; the server's default then).
  return export.build_server(
      task.export_task, BertConfig.from_json_file(files["bert_config_file"]), files["vocab_file"],
      config["do_lower_case"], path, config["max_seq_length"], dtype=dtype, tflite=tflite,
      **task.serving_options_from_config(config))


def _describe(module, serve):
  """{task, label_list, pair, regression} from the server's info(), or for an export written
  before info() existed, from its signature (the label names are then unknown)."""
  if hasattr(module, "info"):
    info = {key: value.numpy() for key, value in module.info().items()}
    return dict(task=info["task"].decode(), pair=bool(info["pair"]),
                regression=bool(info["regression"]),
                label_list=[label.decode() for label in info["label_list"]] or None)
  inputs = set(serve.structured_input_signature[1])
  return dict(task=base.for_signature(inputs).export_task, pair="text_b" in inputs,
              label_list=None,
              regression="scores" in serve.structured_outputs)


# ---------------------------------------------------------------------------- calling


class Predictor:
  """Calls a task server on Python strings; see the module docstring for what each task gives.

    classifier  p(texts) / p(texts, text_b=[...]) / p([(text_a, text_b), ...])
    squad       p(question=..., context=...): a string each, or lists of the same length
    ner         p(sentences)
  A single string stands for a list of one; the result is always a list, one item per input.
  """

  def __init__(self, serve, task, label_list=None, pair=False, regression=False, batch_size=32,
               module=None, backend="savedmodel"):
    self.serve = serve
    self.backend = backend  # what runs the model: "savedmodel" or "tflite"
    self.module = module  # the loaded SavedModel or the in-memory server, kept alive
    self.task = task
    self.label_list = label_list
    self.pair = pair
    self.regression = regression
    self.batch_size = batch_size

  def __repr__(self):
    labels = f", labels {self.label_list}" if self.label_list else ""
    return (f"<bert_tf Predictor: {self.task}{labels}, batch_size {self.batch_size}, "
            f"{self.backend}>")

  def __call__(self, texts=None, text_b=None, *, question=None, context=None):
    serving = base.for_export(self.task, flag="task")
    inputs = serving.predictor_inputs(self, texts, text_b, question, context)
    lengths = {name: len(values) for name, values in inputs.items()}
    if len(set(lengths.values())) > 1:
      raise BertTfError(f"{self.task} predictor: as many of each input are needed, got "
                        f"{', '.join(f'{n} {name}' for name, n in lengths.items())}")
    return [serving.predictor_result(self, row) for row in self._run(inputs)]

  def _run(self, inputs):
    """The server's outputs per input ({name: numpy value}), batch_size inputs per call.

    Length buckets: the inputs go to the server in order of their length in characters (and come
    back in the caller's order), so each batch holds inputs of about the same length and the
    server, which pads a batch to its longest input, computes little padding."""
    count = len(next(iter(inputs.values())))
    order = sorted(range(count), key=lambda i: sum(len(values[i]) for values in inputs.values()))
    rows = [None] * count
    for start in range(0, count, self.batch_size):
      indexes = order[start:start + self.batch_size]
      batch = {name: tf.constant([values[i] for i in indexes], tf.string)
               for name, values in inputs.items()}
      outputs = {name: value.numpy() for name, value in self.serve(**batch).items()}
      for k, i in enumerate(indexes):
        rows[i] = {name: value[k] for name, value in outputs.items()}
    return rows

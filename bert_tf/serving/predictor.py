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
  predictor.load("stsb_embeddings").embed(["A cat.", "A dog."])  # -> float32 [2, H], unit rows

The predictor calls the very server an export holds (bert_tf.serving.export: the tokenization, the model
and the post-processing in one graph), batch_size inputs at a time, and turns its outputs into
Python values. From an export it calls the SavedModel's serving_default signature; from a
fine-tuning output_dir it builds the same server in memory (export.build_server, nothing written)
from the run's latest checkpoint and the files the run left there: task_config.json (written by
finetuning.run when training starts: write_task_config), bert_config.json and vocab.txt (or the
bert_config_file= / vocab_file= arguments of load()).

Results, one per input: a classifier gives {"label", "score" (its probability), "scores" (every
label's)}, a regression task (STS-B) {"score"}; SQuAD {"answer", "score", "has_answer",
"null_score_diff"} (the answer is "" where the model predicts none); NER a list of (word, tag)
pairs, the sentence split on whitespace; a sentence-embedding model (run_embeddings.py) a
float32 vector of length 1, and predictor.embed(texts) all of them as one [N, H] array. What a
task's inputs and results are is its server's (the registered task's server_class:
predictor_inputs, predictor_result; bert_tf.tasks.text_server).
"""
import json
import os

from absl import logging

from bert_tf.training import machine

machine.prefer_onednn()  # before TensorFlow is imported (it reads the setting once, then)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bert_tf.errors import BertTfError  # noqa: E402
from bert_tf.io import fileio  # noqa: E402
from bert_tf.model.config import BertConfig  # noqa: E402
from bert_tf.model.formats import tf_checkpoint  # noqa: E402
from bert_tf.model import model_files  # noqa: E402
from bert_tf.serving import backends  # noqa: E402
from bert_tf.serving import export  # noqa: E402
from bert_tf.serving import guard  # noqa: E402
from bert_tf.serving import openvino_runner  # noqa: E402
from bert_tf.tasks import base  # noqa: E402
from bert_tf.training import precision  # noqa: E402

TASK_CONFIG_FILE = tf_checkpoint.TASK_CONFIG_FILE


# ---------------------------------------------------------------------------- task_config.json


# ---------------------------------------------------------------------------- loading


def load(path, task=None, batch_size=32, bert_config_file=None, vocab_file=None, dtype=None,
         backend="auto", max_quantization_loss=guard.MAX_LOSS):
  """A Predictor for an export directory (a SavedModel, or numbered versions of one: the newest)
  or a fine-tuning output_dir (with task_config.json; its latest checkpoint).

  task: a registered task with an export (e.g. "glue", "squad", "ner"; or an older name of one,
  e.g. "classifier") to check that path holds that task (None: any).
  bert_config_file, vocab_file: for an output_dir without bert_config.json / vocab.txt copies.
  dtype: the precision served. None: an export's SavedModel's own (float32 unless exported with
  --dtype=bfloat16), an output_dir's float32. float32; bfloat16 (an export's bfloat16 SavedModel,
  or OpenVINO on a CPU with bfloat16 instructions; an output_dir's model built in bfloat16);
  float16 (an output_dir's); int8 (an export's --quantize model: TensorFlow Lite's, or
  OpenVINO's). An export's reduced precision is served only where its accuracy check against
  float32 (assets.extra/quantization.json) lost at most max_quantization_loss points (None:
  unchecked), else refused in one line naming both figures.
  backend: "savedmodel" (the server's graph), "tflite": the same server (tokenization, outputs
  and post-processing, any task) around the model run by TensorFlow Lite, or "openvino": the
  same around the export's model.tflite run by OpenVINO (where the openvino package is
  installed). An export made with --tflite holds the model and what rebuilds its server; an
  output_dir's float32 model is converted on loading. "auto": for an export that holds the file,
  the backend timed fastest on this machine (at batch 1 and batch_size, once per export and CPU:
  bert_tf.serving.backends) among those that serve dtype (float32: savedmodel and tflite), else
  savedmodel. One log line says the backend and why.
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
  backends.check_dtype(dtype)
  if task is not None:
    task = base.for_export(task, flag="task").name
  if tf.io.gfile.exists(os.path.join(path, TASK_CONFIG_FILE)):
    dtype = dtype or "float32"
    backend = backends.for_output_dir(path, backend, dtype)
    module = _server_from_output_dir(path, bert_config_file, vocab_file, dtype,
                                     tflite=backend == "tflite")
    loaded = _predictor(module, module.serve, batch_size, backend, dtype)
  elif tf.io.gfile.exists(os.path.join(path, "saved_model.pb")) or export.versions(path):
    version = export.resolve(path)
    loaded = backends.pick(version, backend, batch_size,
                           lambda name, d: _from_export(version, name, batch_size, d),
                           dtype=None if dtype == "auto" else dtype,
                           max_loss=max_quantization_loss)
  else:
    raise BertTfError(f"{path}: neither an export (saved_model.pb, or numbered versions of one) "
                      f"nor a fine-tuning output_dir ({TASK_CONFIG_FILE})")
  if task is not None and task != loaded.task:
    raise BertTfError(f"task: {path} holds a {loaded.task} model, not {task}")
  if (backend, dtype) == ("openvino", "int8"):  # named only: auto times it against TF Lite's
    warning = openvino_runner.int8_warning(machine.read_cpuinfo())
    if warning:
      logging.warning(warning)
  return loaded


def _warn_if_emulated(backend, dtype):
  """Warns when TensorFlow serves bfloat16 on a CPU without bfloat16 instructions, where it is
  emulated and slower than float32 (OpenVINO refuses bfloat16 there; TensorFlow does not)."""
  if backend != "savedmodel" or dtype != "bfloat16":  # float32 loads read nothing more
    return
  warning = precision.emulation_warning(dtype, precision.device_in_use()[0],
                                        machine.read_cpuinfo(), name="dtype")
  if warning:
    logging.warning(warning)


BACKENDS = backends.BACKENDS


def _from_export(version, backend, batch_size, dtype="float32"):
  """The Predictor of an export's version directory through backend savedmodel, tflite or
  openvino, in dtype (backends.pick checked that the backend serves it)."""
  if backend in ("tflite", "openvino"):
    module = export.tflite_server(version, backend=backend, dtype=dtype)
    return _predictor(module, module.serve, batch_size, backend, dtype)
  module = export.load(version)
  return _predictor(module, module.signatures["serving_default"], batch_size, backend, dtype)


def _predictor(module, serve, batch_size, backend, dtype="float32"):
  _warn_if_emulated(backend, dtype)
  return Predictor(serve, batch_size=batch_size, module=module, backend=backend, dtype=dtype,
                   **_describe(module, serve))


def for_server(server, backend="savedmodel", batch_size=32):
  """A Predictor calling a task server built in memory (export.build_server, make_server)."""
  return _predictor(server, server.serve, batch_size, backend)


# The fields load() needs in task_config.json, and their types (and "task", or "export_kind" in
# the files of runs before it: base.for_task_config).
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
  for field, kind in _TASK_CONFIG_FIELDS.items():
    if not isinstance(config.get(field), kind):
      found = "missing" if field not in config else f"a {type(config[field]).__name__}"
      raise BertTfError(f"{config_path}: field {field!r} should be a {kind.__name__}, is {found}")
  task = base.for_task_config(config)
  what = task and (task.unservable(config) if task.server_class else task.name)
  if task is None or what:
    what = what or config.get("task_name") or config.get("task") or config.get("export_kind")
    raise BertTfError(f"{config_path}: a {what} run; a predictor serves fine-tuned "
                      f"{', '.join(base.export_names())} models only")
  return config, task


def _server_from_output_dir(path, bert_config_file, vocab_file, dtype, tflite):
  """export.build_server for an output_dir's task_config.json and latest checkpoint (tflite: its
  model run by TensorFlow Lite)."""
  config, task = _read_task_config(path)
  own = model_files.describe(path)  # the files beside the run's checkpoints, through the one door
  files = {"bert_config_file": bert_config_file or (own and own.config_file) or
                               os.path.join(path, tf_checkpoint.CONFIG_FILE),
           "vocab_file": vocab_file or (own and own.vocab_file) or
                         os.path.join(path, tf_checkpoint.VOCAB_FILE)}
  missing = [f"{name}= ({files[name]} not found)" for name in files
             if not tf.io.gfile.exists(files[name])]
  if missing:
    raise BertTfError(f"{path}: give predictor.load {' and '.join(missing)}")
  # Only the options the file has (doc_stride: absent from the task_config.json of runs before
  # exports took long contexts; the server's default then).
  return export.build_server(
      task, BertConfig.from_json_file(files["bert_config_file"]), files["vocab_file"],
      config["do_lower_case"], path, config["max_seq_length"], dtype=dtype, tflite=tflite,
      **{key: config[key] for key in task.server_class.OPTIONS if key in config})


def _describe(module, serve):
  """{task (the registered name), label_list, pair, regression} from the server's info(), or for
  an export written before info() existed, from its signature (the label names are then
  unknown)."""
  if hasattr(module, "info"):
    info = {key: value.numpy() for key, value in module.info().items()}
    return dict(task=base.for_export(info["task"].decode(), flag="task").name,
                pair=bool(info["pair"]), regression=bool(info["regression"]),
                label_list=[label.decode() for label in info["label_list"]] or None)
  inputs = set(serve.structured_input_signature[1])
  return dict(task=base.for_signature(inputs).name, pair="text_b" in inputs,
              label_list=None,
              regression="scores" in serve.structured_outputs)


# ---------------------------------------------------------------------------- calling


class Predictor:
  """Calls a task server on Python strings; see the module docstring for what each task gives.

  How it is called is its server's (predictor_inputs), e.g. a classifier p(texts),
  p(texts, text_b=[...]) or p([(text_a, text_b), ...]); SQuAD p(question=..., context=...), a
  string each or lists of the same length; NER p(sentences). A single string stands for a list
  of one; the result is always a list, one item per input.
  """

  def __init__(self, serve, task, label_list=None, pair=False, regression=False, batch_size=32,
               module=None, backend="savedmodel", dtype="float32"):
    self.serve = serve
    self.backend = backend  # what runs the model: "savedmodel", "tflite" or "openvino"
    self.dtype = dtype  # the precision it serves in
    self.module = module  # the loaded SavedModel or the in-memory server, kept alive
    self.task = task
    self.label_list = label_list
    self.pair = pair
    self.regression = regression
    self.batch_size = batch_size

  def __repr__(self):
    labels = f", labels {self.label_list}" if self.label_list else ""
    return (f"<bert_tf Predictor: {self.task}{labels}, batch_size {self.batch_size}, "
            f"{self.backend}, {self.dtype}>")

  def __call__(self, *texts, **inputs):
    server = base.for_export(self.task, flag="task").server_class
    inputs = server.predictor_inputs(self, *texts, **inputs)
    lengths = {name: len(values) for name, values in inputs.items()}
    if len(set(lengths.values())) > 1:
      raise BertTfError(f"{self.task} predictor: as many of each input are needed, got "
                        f"{', '.join(f'{n} {name}' for name, n in lengths.items())}")
    return [server.predictor_result(self, row) for row in self._run(inputs)]

  def embed(self, texts):
    """The unit-length vectors of a sentence-embedding model (run_embeddings.py's output_dir, an
    export of --task=embeddings), float32 [len(texts), H], one row per text (a string stands for
    a list of one): ready for a vector index, where their dot products are cosines."""
    server = base.for_export(self.task, flag="task").server_class
    rows = self._run(server.predictor_inputs(self, texts))
    if "embeddings" not in rows[0]:
      raise BertTfError(f"{self.task} predictor: embed() is for sentence-embedding models "
                        f"(run_embeddings.py, export_savedmodel.py --task=embeddings); call this "
                        f"one as predictor(...)")
    return np.stack([row["embeddings"] for row in rows]).astype(np.float32)

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

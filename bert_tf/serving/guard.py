"""The accuracy guard of reduced-precision serving: a bfloat16 or int8 path is scored against
float32 on held-out examples of the task, and refused when it loses more than it may.

A path is a backend serving a precision ("tflite/int8", "openvino/bfloat16", "savedmodel/bfloat16",
...: path_key). Its check runs both servers, float32 and the path's, the very servers a predictor
calls (tokenization, windows and post-processing in them), on the task's check rows: its dev rows
(GLUE's dev.tsv, CoNLL-2003's valid.txt, SQuAD's --predict_file) or a --quantization_check_file of the
same format. It scores both with the task's metrics, the run scripts' own (GLUE's eval_metrics,
conlleval's entity F1, SQuAD's official script), and counts the rows whose results differ: a
label, an answer (or its no-answer decision), a sentence's tags. The loss is in points of the
task's keep-best metric (keep_best's default: eval_accuracy for most of GLUE, eval_f1 for MRPC,
QQP and NER, eval_mcc for CoLA, eval_spearman for STS-B, f1 for SQuAD), float32's minus the path's,
x100 where the metric is a fraction; a path losing more than max_loss (MAX_LOSS by default) is
refused in one line naming both figures (refusal).

  check = guard.check_set(task_class, task_options, check_file=None)
  base = guard.reference(check, float32_predictor)       # its results and scores
  record = guard.score(check, base, predictor(**check.inputs), max_loss)
  doc = guard.document(check, base["scores"], {path_key: record, ...}, max_loss)
  source, inputs = guard.calibration_inputs(task_class, task_options, count, seed)
  rows = guard.model_inputs(float32_predictor, inputs)   # int8's calibration rows

The export keeps the document in QUANTIZATION_FILE (read_records); the predictor reads it at load
(accepted). calibration_inputs are training examples, drawn with a seed.
"""
import json
import os
import random

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.tasks import base

MAX_LOSS = 0.5  # points of the keep-best metric a reduced-precision path may lose by default
QUANTIZATION_FILE = os.path.join("assets.extra", "quantization.json")
DIFFERING_ROWS = 20  # how many of the rows whose results differ a record names (from 0)
BACKEND_NAMES = {"savedmodel": "SavedModel", "tflite": "TensorFlow Lite",
                 "openvino": "OpenVINO"}


def path_key(backend, dtype):
  return f"{backend}/{dtype}"


def describe_path(key):
  """"OpenVINO bfloat16" of "openvino/bfloat16"."""
  backend, dtype = key.split("/")
  return f"{BACKEND_NAMES.get(backend, backend)} {dtype}"


# ---------------------------------------------------------------------------- the task's rows


def check_set(task_class, task_options, check_file=None):
  """The CheckSet of the task (a registered Task class with a server) and its options: the rows
  of check_file, or else of the task's dev file (Task.dev_file, Task.check_rows)."""
  if task_class.name not in base.precision_checked():
    raise BertTfError(f"--quantize: no accuracy check is known for a {task_class.name} model "
                      f"(only {', '.join(base.precision_checked())})")
  flag, path = (("--quantization_check_file", check_file) if check_file else
                task_class.dev_file(task_options))
  if not path:
    raise BertTfError(f"{flag}: needed to check a reduced-precision model against float32 "
                      f"(the task's dev rows), or give --quantization_check_file")
  fileio.check_input_file(path, flag)
  return task_class.check_rows(task_options, path)


# ---------------------------------------------------------------------------- calibration


def _training_inputs(task_class, task_options):
  """(the training file, the predictor inputs of its examples): Task.calibration_rows."""
  rows = task_class.calibration_rows(task_options)
  if rows is None:
    raise BertTfError(f"--quantize: int8 calibration is not known for a {task_class.name} model")
  return rows


def calibration_inputs(task_class, task_options, count, seed):
  """(the training file, {predictor input: [value]} of `count` of its examples drawn with
  `seed`, in the file's order)."""
  path, inputs = _training_inputs(task_class, task_options)
  total = len(next(iter(inputs.values())))
  chosen = sorted(random.Random(seed).sample(range(total), min(count, total)))
  return path, {name: [values[i] for i in chosen] for name, values in inputs.items()}


def model_inputs(predictor, inputs):
  """The model inputs its server makes of predictor inputs (a predictor call's keyword
  arguments, as calibration_inputs gives them): one {feature: int32 [1, T]} per row the server's
  tokenize signature makes (a SQuAD context makes a row a window), cut to the row's real length,
  as the server gives the model its batches."""
  server = base.for_export(predictor.task, flag="task").server_class
  texts = server.predictor_inputs(predictor, **inputs)
  rows = []
  for i in range(len(next(iter(texts.values())))):
    features = predictor.module.tokenize(**{name: tf.constant([values[i]], tf.string)
                                            for name, values in texts.items()})
    lengths = features["input_mask"].numpy().sum(axis=1)
    for row, length in enumerate(lengths):
      rows.append({name: features[name].numpy()[row:row + 1, :max(1, length)].astype(np.int32)
                   for name in ("input_ids", "input_mask", "segment_ids")})
  return rows


# ---------------------------------------------------------------------------- scoring


def score(check, reference, results, max_loss=MAX_LOSS):
  """The record of a path: its results on the check rows against float32's (`reference`,
  {"results", "scores"}): every metric, the rows that differ, the loss and whether it is
  accepted."""
  scores = check.scores(results)
  differ = [i for i, (a, b) in enumerate(zip(reference["results"], results))
            if not check.same(a, b)]
  loss = (reference["scores"][check.metric] - scores[check.metric]) * check.scale
  return {"metrics": _plain(scores), "agreement": 1.0 - len(differ) / max(1, check.count),
          "differ": len(differ), "differing_rows": differ[:DIFFERING_ROWS],
          "loss": round(loss, 6), "accepted": loss <= max_loss + 1e-9}


def reference(check, predictor):
  """float32's {"results", "scores"} on the check rows."""
  results = predictor(**check.inputs)
  return {"results": results, "scores": check.scores(results)}


def _plain(scores):
  return {name: float(value) for name, value in scores.items()
          if isinstance(value, (int, float, np.floating, np.integer))}


def document(check, reference_scores, records, max_loss, **extra):
  """quantization.json's content: the check, float32's metrics, every path's record."""
  return {"metric": check.metric, "points_per_unit": check.scale, "max_loss": max_loss,
          "check": {"source": check.source, "rows": check.count, "what": check.what},
          "float32": _plain(reference_scores), "paths": records, **extra}


def refusal(key, doc, max_loss=None):
  """The one line that refuses path `key` of a quantization.json document: both figures."""
  record, metric, scale = doc["paths"][key], doc["metric"], doc["points_per_unit"]
  max_loss = doc["max_loss"] if max_loss is None else max_loss
  check = doc["check"]
  return (f"{describe_path(key)} scores {metric} {scale * record['metrics'][metric]:.2f} against "
          f"float32's {scale * doc['float32'][metric]:.2f} on {check['rows']} {check['what']} "
          f"of {check['source']} ({record['loss']:.2f} points lost, more than "
          f"max_quantization_loss {max_loss:g}; {record['differ']} of {check['rows']} differ)")


def figures(version):
  """summary_rows of an export version's quantization.json, or {} without one."""
  doc = version and read_records(version)
  return summary_rows(doc) if doc else {}


def summary_rows(doc):
  """{name: figure} of a quantization.json document for a closing summary: float32's metric,
  each path's, its agreement and whether it was kept."""
  metric, scale = doc["metric"], doc["points_per_unit"]
  rows = {f"float32 {metric}": round(scale * doc["float32"][metric], 2)}
  for key, record in doc["paths"].items():
    verdict = "" if record["accepted"] else " (refused)"
    rows[f"{describe_path(key)} {metric}"] = (
        f"{scale * record['metrics'][metric]:.2f}, {100 * record['agreement']:.1f}% agree"
        f"{verdict}")
  return rows


# ---------------------------------------------------------------------------- the export's file


def read_records(version):
  """The quantization.json document of an export version, or None."""
  path = os.path.join(version, QUANTIZATION_FILE)
  if not tf.io.gfile.exists(path):
    return None
  try:
    doc = json.loads(fileio.read_text(path))
  except ValueError:
    raise BertTfError(f"{path}: not the JSON an export writes; export again") from None
  return doc


def accepted(version, backend, dtype, max_loss=MAX_LOSS):
  """None when the export's check accepts `backend` serving `dtype` within max_loss (None:
  unchecked use allowed), else the one-line reason it is refused."""
  if max_loss is None:
    return None
  doc = read_records(version) or {"paths": {}}
  key = path_key(backend, dtype)
  if key not in doc["paths"]:
    return (f"{describe_path(key)}: {version} holds no accuracy check of it against float32 "
            f"(export with --tflite and --quantize=int8 or --dtype=bfloat16 where it can run; "
            f"or max_quantization_loss=None to serve it unchecked)")
  if doc["paths"][key]["loss"] > max_loss + 1e-9:
    return refusal(key, doc, max_loss) + ": refused"
  return None

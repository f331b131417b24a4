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
import dataclasses
import json
import os
import random
import types
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.tasks import base
from bert_tf.tasks import conll
from bert_tf.tasks import conlleval
from bert_tf.tasks import glue
from bert_tf.tasks import squad
from bert_tf.tasks import squad_metrics

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


@dataclasses.dataclass(frozen=True)
class CheckSet:
  """The held-out rows of a task a path is checked on, and how they are scored."""
  source: str  # the file the rows come from
  what: str  # what a row is, for messages ("dev examples", "sentences", "questions")
  inputs: dict  # the predictor call's keyword arguments ({name: [value per row]})
  metric: str  # the keep-best metric
  scale: float  # points per unit of the metric (100 for a fraction)
  scores: Callable[[list], dict]  # the predictor's results -> {metric name: value}
  same: Callable[[Any, Any], bool]  # whether two results of one row are the same

  @property
  def count(self):
    return len(next(iter(self.inputs.values())))


# ---------------------------------------------------------------------------- each task's rows


def _glue_task(task_options):
  """The GLUE task of run_classifier's --task_name (its processor, labels and metrics)."""
  if not task_options.task_name:
    raise BertTfError("--task_name: needed to read the classifier's check rows")
  return glue.GlueTask(types.SimpleNamespace(task=task_options), None)


def _glue_rows(task_options, path, split):
  task = _glue_task(task_options)
  examples = task.processor._create_examples(path, split)  # pylint: disable=protected-access
  inputs = {"texts": [(e.text_a, e.text_b or "") if task.processor.columns[split][3] is not None
                      else e.text_a for e in examples]}
  return task, examples, inputs


def _glue_check(task_options, path):
  task, examples, inputs = _glue_rows(task_options, path, "dev")
  labels = np.array([e.label if task.regression else task.label_list.index(e.label)
                     for e in examples], np.float64)

  def scores(results):
    if task.regression:
      logits = np.array([[r["score"]] for r in results], np.float64)
    else:  # the probabilities' logarithms: the logits' argmax and cross-entropy
      logits = np.log(np.maximum(np.array([[r["scores"][name] for name in task.label_list]
                                           for r in results], np.float64), 1e-30))
    return task.eval_metrics(logits, labels)

  def same(a, b):
    return a.get("label", a.get("score")) == b.get("label", b.get("score"))

  return CheckSet(path, "dev examples", inputs, task.primary_metric, 100.0, scores, same)


def _ner_check(task_options, path):
  sentences = conll.read_conll(path)
  gold = [s.tags for s in sentences]

  def scores(results):
    predicted = [[tag for _, tag in result] for result in results]
    return conlleval.scores_to_results(conlleval.entity_scores(gold, predicted))

  return CheckSet(path, "sentences", {"texts": [" ".join(s.words) for s in sentences]},
                  "eval_f1", 100.0, scores, lambda a, b: a == b)


def _squad_questions(path):
  """(dataset, [(id, question, context)]) of a SQuAD file."""
  dataset = squad.load_squad_json(path)
  return dataset, [(qa["id"], qa["question"], paragraph["context"])
                   for article in dataset["data"] for paragraph in article["paragraphs"]
                   for qa in paragraph["qas"]]


def _squad_check(task_options, path):
  dataset, questions = _squad_questions(path)
  version_2 = task_options.version_2_with_negative or any(
      qa.get("is_impossible") for article in dataset["data"]
      for paragraph in article["paragraphs"] for qa in paragraph["qas"])

  def scores(results):
    predictions = {qid: r["answer"] if r["has_answer"] else ""
                   for (qid, _, _), r in zip(questions, results)}
    if version_2:
      return dict(squad_metrics.evaluate_v2(dataset["data"], predictions))
    return dict(squad_metrics.evaluate_v1(dataset["data"], predictions))

  def same(a, b):
    return a["has_answer"] == b["has_answer"] and (not a["has_answer"] or
                                                  a["answer"] == b["answer"])

  return CheckSet(path, "questions", {"question": [q for _, q, _ in questions],
                                      "context": [c for _, _, c in questions]},
                  "f1", 1.0, scores, same)


def _dev_file(task_name, task_options):
  """(flag, the task's dev file) from its options."""
  if task_name == "squad":
    return "--predict_file", task_options.predict_file
  data_dir = task_options.data_dir
  if task_name == "ner":
    return "--data_dir", data_dir and os.path.join(data_dir, conll.SPLIT_FILES["dev"])
  return "--data_dir", data_dir and os.path.join(
      data_dir, glue.get_processor(task_options.task_name).dev_file)


_CHECKS = {"glue": _glue_check, "ner": _ner_check, "squad": _squad_check}


def check_set(task_class, task_options, check_file=None):
  """The CheckSet of the task (a registered Task class with a server) and its options: the rows
  of check_file, or else of the task's dev file."""
  if task_class.name not in _CHECKS:
    raise BertTfError(f"--quantize: no accuracy check is known for a {task_class.name} model "
                      f"(only {', '.join(sorted(_CHECKS))})")
  flag, path = ("--quantization_check_file", check_file) if check_file else _dev_file(
      task_class.name, task_options)
  if not path:
    raise BertTfError(f"{flag}: needed to check a reduced-precision model against float32 "
                      f"(the task's dev rows), or give --quantization_check_file")
  fileio.check_input_file(path, flag)
  return _CHECKS[task_class.name](task_options, path)


# ---------------------------------------------------------------------------- calibration


def _training_inputs(task_class, task_options):
  """(flag, the training file, the predictor inputs of its examples)."""
  name = task_class.name
  if name == "squad":
    if not task_options.train_file:
      raise BertTfError("--train_file: needed to calibrate int8 on the task's training examples")
    _, questions = _squad_questions(task_options.train_file)
    return task_options.train_file, {"question": [q for _, q, _ in questions],
                                     "context": [c for _, _, c in questions]}
  if not task_options.data_dir:
    raise BertTfError("--data_dir: needed to calibrate int8 on the task's training examples")
  if name == "ner":
    path, sentences = conll.read_split(task_options.data_dir, "train")
    return path, {"texts": [" ".join(s.words) for s in sentences]}
  if name != "glue":
    raise BertTfError(f"--quantize: int8 calibration is not known for a {name} model")
  path = os.path.join(task_options.data_dir,
                      glue.get_processor(task_options.task_name).train_file)
  fileio.check_input_file(path, "--data_dir")
  return path, _glue_rows(task_options, path, "train")[2]


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

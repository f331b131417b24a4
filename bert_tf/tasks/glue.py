"""GLUE and XNLI for run_classifier.py: tsv processors, features, TFRecords (classifier_features),
and GlueTask (the task bert_tf.drivers.finetuning runs: its flags, head, loss, metrics and prediction
files; its server: glue_server.ClassifierServer).

The processors follow the original run_classifier.py (CoLA, MNLI, MRPC, XNLI) and GLUE's standard
tsv layouts for the rest (SST-2, QQP, STS-B, QNLI, RTE, WNLI, MNLI mismatched). Test sets carry no
labels; their examples get the task's first label (0.0 for STS-B), as the original did.
"""
import collections
import csv
import dataclasses
import os
import types
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.fileio import read_lines
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model import heads
from bert_tf.options import option
from bert_tf.tasks import base
from bert_tf.tasks import glue_server
from bert_tf.tasks import metrics
from bert_tf.training import loop


class InputExample:
  """One example: guid, untokenized text_a, optional text_b, and the label (a string, or a float
  for a regression task)."""

  def __init__(self, guid, text_a, text_b=None, label=None):
    self.guid = guid
    self.text_a = text_a
    self.text_b = text_b
    self.label = label


class InputFeatures:
  """The ids of one example, padded to max_seq_length."""

  def __init__(self, input_ids, input_mask, segment_ids, label_id, is_real_example=True):
    self.input_ids = input_ids
    self.input_mask = input_mask
    self.segment_ids = segment_ids
    self.label_id = label_id
    self.is_real_example = is_real_example


def read_tsv(input_file):
  """Rows of a tab separated file as the original's _read_tsv: lines as a tf.gfile gives them
  (fileio.read_lines), no quote character (GLUE text holds bare quotes)."""
  return list(csv.reader(read_lines(input_file), delimiter="\t", quotechar=None))


class DataProcessor:
  """Reads one task's train/dev/test tsv files into InputExamples.

  A subclass states its files, its labels and, per split, whether the file has a header and which
  columns hold the guid, text_a, text_b and label (None: absent).
  """

  train_file = "train.tsv"
  dev_file = "dev.tsv"
  test_file = "test.tsv"
  labels = ["0", "1"]
  regression = False
  # split -> (has_header, guid column, text_a column, text_b column, label column).
  columns = {}
  # The GLUE submission file's name, without ".tsv".
  submission_name = None
  # split -> what the original's guids start with, where that is not the split's name.
  guid_prefixes = {}

  def get_train_examples(self, data_dir):
    return self._create_examples(os.path.join(data_dir, self.train_file), "train")

  def get_dev_examples(self, data_dir):
    return self._create_examples(os.path.join(data_dir, self.dev_file), "dev")

  def get_test_examples(self, data_dir):
    return self._create_examples(os.path.join(data_dir, self.test_file), "test")

  def get_labels(self):
    return list(self.labels)

  def _create_examples(self, path, split):
    has_header, guid_column, a_column, b_column, label_column = self.columns[split]
    lines = read_tsv(path)
    examples = []
    width = None
    for i, line in enumerate(lines):
      if has_header and i == 0:
        width = len(line)
        continue
      if width is None:
        width = len(line)
      needed = max(c for c in (guid_column, a_column, b_column, label_column) if c is not None)
      if len(line) != width or len(line) <= needed:
        raise BertTfError(f"{path}: line {i + 1} has {len(line)} tab-separated columns, expected "
                          f"{width if width > needed else needed + 1}")
      guid = (f"{self.guid_prefixes.get(split, split)}-"
              f"{line[guid_column] if guid_column is not None else i}")
      text_a = line[a_column]
      text_b = line[b_column] if b_column is not None else None
      label = self._label(line[label_column], path, i) if label_column is not None else None
      if label is None:
        label = 0.0 if self.regression else self.labels[0]
      examples.append(InputExample(guid=guid, text_a=text_a, text_b=text_b, label=label))
    if not examples:
      raise BertTfError(f"{path}: no example in the {split} split (the file is "
                        f"{'only its header' if lines else 'empty'}); expected a row per example")
    return examples

  def _label(self, value, path, i):
    if self.regression:
      try:
        return float(value)
      except ValueError:
        raise BertTfError(f"{path}: line {i + 1}: label {value!r} is not a number") from None
    if value not in self.labels:
      raise BertTfError(f"{path}: line {i + 1}: label {value!r} is not one of {self.labels}")
    return value


class ColaProcessor(DataProcessor):
  """CoLA: train/dev have no header (source, label, original label, sentence); test has one."""
  columns = {"train": (False, None, 3, None, 1), "dev": (False, None, 3, None, 1),
             "test": (True, None, 1, None, None)}
  submission_name = "CoLA"


class Sst2Processor(DataProcessor):
  columns = {"train": (True, None, 0, None, 1), "dev": (True, None, 0, None, 1),
             "test": (True, None, 1, None, None)}
  submission_name = "SST-2"


class MrpcProcessor(DataProcessor):
  columns = {"train": (True, None, 3, 4, 0), "dev": (True, None, 3, 4, 0),
             "test": (True, None, 3, 4, None)}
  submission_name = "MRPC"


class QqpProcessor(DataProcessor):
  """QQP: id, qid1, qid2, question1, question2, is_duplicate; test: id, question1, question2."""
  columns = {"train": (True, 0, 3, 4, 5), "dev": (True, 0, 3, 4, 5),
             "test": (True, 0, 1, 2, None)}
  submission_name = "QQP"


class StsbProcessor(DataProcessor):
  """STS-B: a similarity score in [0, 5], learned by regression (one output, squared loss)."""
  labels = [None]
  regression = True
  columns = {"train": (True, 0, 7, 8, 9), "dev": (True, 0, 7, 8, 9),
             "test": (True, 0, 7, 8, None)}
  submission_name = "STS-B"


class MnliProcessor(DataProcessor):
  """MNLI, matched dev and test (as the original); sentences in columns 8 and 9, label last
  (dev has five annotator columns before it, so the last column is the one that is sure)."""
  dev_file = "dev_matched.tsv"
  test_file = "test_matched.tsv"
  labels = ["contradiction", "entailment", "neutral"]
  columns = {"train": (True, 0, 8, 9, -1), "dev": (True, 0, 8, 9, -1),
             "test": (True, 0, 8, 9, None)}
  submission_name = "MNLI-m"
  guid_prefixes = {"dev": "dev_matched"}  # and "test", as the original


class MnliMismatchedProcessor(MnliProcessor):
  dev_file = "dev_mismatched.tsv"
  test_file = "test_mismatched.tsv"
  submission_name = "MNLI-mm"
  guid_prefixes = {"dev": "dev_mismatched"}


class QnliProcessor(DataProcessor):
  labels = ["entailment", "not_entailment"]
  columns = {"train": (True, 0, 1, 2, 3), "dev": (True, 0, 1, 2, 3),
             "test": (True, 0, 1, 2, None)}
  submission_name = "QNLI"


class RteProcessor(QnliProcessor):
  submission_name = "RTE"


class WnliProcessor(DataProcessor):
  columns = {"train": (True, 0, 1, 2, 3), "dev": (True, 0, 1, 2, 3),
             "test": (True, 0, 1, 2, None)}
  submission_name = "WNLI"


class XnliProcessor(DataProcessor):
  """XNLI as the original: train from multinli/multinli.train.<language>.tsv (premise,
  hypothesis, label with "contradictory" renamed), dev from xnli.dev.tsv rows of that language."""
  labels = ["contradiction", "entailment", "neutral"]

  def __init__(self, language="zh"):
    self.language = language
    self.train_file = os.path.join("multinli", f"multinli.train.{language}.tsv")
    self.dev_file = "xnli.dev.tsv"
    self.test_file = "xnli.test.tsv"

  def _create_examples(self, path, split):
    examples = []
    for i, line in enumerate(read_tsv(path)):
      if i == 0:
        continue
      if split == "train":
        _check_width(path, i, line, 3)
        label = "contradiction" if line[2] == "contradictory" else line[2]
        text_a, text_b = line[0], line[1]
      else:
        _check_width(path, i, line, 8)
        if line[0] != self.language:
          continue
        text_a, text_b, label = line[6], line[7], line[1]
      examples.append(InputExample(guid=f"{split}-{i}", text_a=text_a, text_b=text_b,
                                   label=self._label(label, path, i)))
    return examples


def _check_width(path, i, line, needed):
  if len(line) < needed:
    raise BertTfError(f"{path}: line {i + 1} has {len(line)} tab-separated columns, expected at "
                      f"least {needed}")


PROCESSORS = collections.OrderedDict([
    ("cola", ColaProcessor),
    ("sst-2", Sst2Processor),
    ("mrpc", MrpcProcessor),
    ("qqp", QqpProcessor),
    ("sts-b", StsbProcessor),
    ("mnli", MnliProcessor),
    ("mnli-mm", MnliMismatchedProcessor),
    ("qnli", QnliProcessor),
    ("rte", RteProcessor),
    ("wnli", WnliProcessor),
    ("xnli", XnliProcessor),
])
# Other spellings people use for the same tasks.
ALIASES = {"sst2": "sst-2", "stsb": "sts-b", "sts": "sts-b", "mnli-m": "mnli",
           "mnli_mismatched": "mnli-mm", "mnli-mismatched": "mnli-mm"}


def canonical_task_name(task_name):
  """The PROCESSORS key of --task_name (case and ALIASES resolved)."""
  name = task_name.lower()
  name = ALIASES.get(name, name)
  if name not in PROCESSORS:
    raise BertTfError(f"--task_name: unknown task {task_name!r}; known tasks: "
                      f"{', '.join(PROCESSORS)}")
  return name


def get_processor(task_name):
  return PROCESSORS[canonical_task_name(task_name)]()


def truncate_seq_pair(tokens_a, tokens_b, max_length):
  """Pops a token off the longer sequence until the pair fits, as the original."""
  while len(tokens_a) + len(tokens_b) > max_length:
    if len(tokens_a) > len(tokens_b):
      tokens_a.pop()
    else:
      tokens_b.pop()


def convert_single_example(ex_index, example, label_list, max_seq_length, tokenizer):
  """[CLS] A [SEP] (B [SEP]), segment ids 0 then 1, zero padding; label as an id (or a float)."""
  tokens_a = tokenizer.tokenize(example.text_a)
  tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
  if tokens_b:
    truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  else:
    tokens_a = tokens_a[:max_seq_length - 2]

  tokens = ["[CLS]"] + tokens_a + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + ["[SEP]"]
    segment_ids += [1] * (len(tokens_b) + 1)
  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  padding = max_seq_length - len(input_ids)
  input_ids += [0] * padding
  input_mask += [0] * padding
  segment_ids += [0] * padding

  if label_list == [None]:
    label_id = float(example.label)
  else:
    label_id = label_list.index(example.label)
  if ex_index < 5:  # the original's dumps, shown with --verbosity=1
    logging.vlog(1, "*** Example ***")
    logging.vlog(1, "guid: %s", example.guid)
    logging.vlog(1, "tokens: %s", " ".join(tokens))
    logging.vlog(1, "input_ids: %s", " ".join(str(x) for x in input_ids))
    logging.vlog(1, "label: %s (id = %s)", example.label, label_id)
  return InputFeatures(input_ids, input_mask, segment_ids, label_id)


def classifier_features(max_seq_length, regression=False):
  """The records of run_classifier.py (one sequence per example, as the original's
  train.tf_record): feature_dict's, as name_to_features."""
  return {
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.float32 if regression else tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }


def feature_dict(feature):
  return collections.OrderedDict([
      ("input_ids", feature.input_ids),
      ("input_mask", feature.input_mask),
      ("segment_ids", feature.segment_ids),
      ("label_ids", [feature.label_id]),
      ("is_real_example", [int(feature.is_real_example)]),
  ])


def file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer,
                                            output_file):
  """Writes the examples' features as TFRecords (classifier_features), atomically."""

  def feature_dicts():
    for ex_index, example in enumerate(examples):
      if ex_index % 10000 == 0:
        logging.info("Writing example %d of %d", ex_index, len(examples))
      yield feature_dict(convert_single_example(ex_index, example, label_list, max_seq_length,
                                                tokenizer))

  return records.write_records(output_file, feature_dicts())


@dataclasses.dataclass(frozen=True)
class GlueOptions:
  """run_classifier.py's own flags (--task_name also export_savedmodel.py's, for --task=glue)."""
  data_dir: Optional[str] = option(None, "The input data dir. Should contain the .tsv files (or "
                                      "other data files) for the task.",
                                      export=base.DATA_DIR_EXPORT)
  task_name: Optional[str] = option(
      None, "The name of the task to train: cola, sst-2, mrpc, qqp, sts-b, mnli, mnli-mm, qnli, "
      "rte, wnli or xnli.", export="--task=glue: the GLUE task the model was fine-tuned on (its "
      "label names and whether it takes pairs).")

  def __post_init__(self):
    fileio.check_data_directory(self.data_dir)
    if self.task_name:
      canonical_task_name(self.task_name)  # --task_name: unknown task ...


def classifier_labels(task_name):
  """(label_list or None for regression, whether the task's inputs are pairs) of a GLUE task."""
  processor = get_processor(task_name)
  pair = processor.columns["dev"][3] is not None
  return (None if processor.regression else processor.get_labels()), pair


@base.register("glue")
class GlueTask(base.Task):
  """run_classifier.py's task for bert_tf.drivers.finetuning: a GLUE or XNLI processor, BertClassifier
  (a regressor for STS-B), the original's eval metrics and prediction files; served by
  glue_server.ClassifierServer (text_a[, text_b] -> label probabilities)."""

  script = "run_classifier.py"
  distillable = True
  aliases = ("classifier",)  # its name in exports and task_config.json files of earlier versions
  options_class = GlueOptions
  server_class = glue_server.ClassifierServer
  run_keys = ("task_name",)

  def __init__(self, options, tokenizer):
    super().__init__(options, tokenizer)
    self.glue_name = canonical_task_name(options.task.task_name)
    self.processor = get_processor(options.task.task_name)
    self.label_list = self.processor.get_labels()
    self.regression = self.processor.regression

  def schema(self, is_training):
    return classifier_features(self.options.max_seq_length, regression=self.regression)

  def loss_fn(self, features, outputs):
    """The mean over the examples (packed rows: packing_finetune.mean_loss) of the squared
    error (regression) or the cross-entropy."""
    logits = outputs["logits"]
    if self.regression:
      labels = tf.cast(features["label_ids"], tf.float32)
      losses = tf.square(logits[..., 0] - labels)
    else:
      losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label_ids"],
                                                              logits=logits)
    return packing_finetune.mean_loss(features, losses)

  def train_metric_fn(self, features, outputs):
    if self.regression:
      return {}
    return {"accuracy": (heads.correct_predictions(features["label_ids"], outputs["logits"]),
                         packing_finetune.example_weights(features))}

  def write_train_records(self, path):
    examples = self.write_split_records("train", path)
    return len(examples), len(examples), "training examples"

  def split_file(self, split):
    return "--data_dir", os.path.join(self.options.task.data_dir,
                                      getattr(self.processor, f"{split}_file"))

  def write_split_records(self, split, path):
    examples = getattr(self.processor, f"get_{split}_examples")(self.options.task.data_dir)
    file_based_convert_examples_to_features(examples, self.label_list, self.options.max_seq_length,
                                            self.tokenizer, path)
    return examples

  def write_transfer_records(self, path, transfer_file):
    """Distillation's unlabelled transfer set (bert_tf.drivers.distillation): a text a line, or a
    pair tab-separated for a pair task, written as records with the first label as a
    placeholder; returns how many."""
    pair = classifier_labels(self.glue_name)[1]
    examples = []
    for i, line in enumerate(read_tsv(transfer_file)):
      if not "".join(line).strip():
        continue
      if len(line) != 1 + pair:
        raise BertTfError(f"--transfer_file: {transfer_file}: line {i + 1} has {len(line)} "
                          f"tab-separated columns, expected {1 + pair} ({self.glue_name} "
                          f"takes {'pairs' if pair else 'one text'}, no label)")
      examples.append(InputExample(f"transfer-{i}", line[0], line[1] if pair else None,
                                   self.label_list[0]))
    if not examples:
      raise BertTfError(f"--transfer_file: {transfer_file} holds no line")
    file_based_convert_examples_to_features(examples, self.label_list, self.options.max_seq_length,
                                            self.tokenizer, path)
    return len(examples)

  def finish_split(self, split, examples, batches, global_step, output_dir=None):
    output_dir = output_dir or self.options.output_dir
    logits, labels = logits_and_labels(batches)
    if split == "test":
      self.write_predictions(logits, output_dir)
      return None
    logging.info("***** Eval results (%d examples) *****", len(examples))
    results = self.eval_metrics(logits, labels)
    results["global_step"] = global_step
    loop.write_eval_results(os.path.join(output_dir, "eval_results.txt"), results)
    return results

  def eval_metric_names(self):
    """The names eval_metrics reports for this task (asked of eval_metrics itself)."""
    return sorted(self.eval_metrics(np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.0, 1.0])))

  @property
  def primary_metric(self):
    """The figure the BERT paper reports for the task (early stopping's default)."""
    if self.regression:
      return "eval_spearman"
    return {"cola": "eval_mcc", "mrpc": "eval_f1",
            "qqp": "eval_f1"}.get(self.glue_name, "eval_accuracy")

  def eval_metrics(self, logits, labels):
    """eval_results.txt entries, from all of the dev set's logits and labels at once."""
    if self.regression:
      scores = logits[:, 0]
      return {"eval_loss": float(np.mean((scores - labels) ** 2)),
              "eval_pearson": metrics.pearson(labels, scores),
              "eval_spearman": metrics.spearman(labels, scores),
              # Rounded scores against rounded labels: the accuracy line every task has.
              "eval_accuracy": metrics.accuracy(np.round(labels), np.round(scores))}
    labels = labels.astype(np.int64)
    predictions = logits.argmax(axis=-1)
    results = {"eval_loss": metrics.cross_entropy(logits, labels),
               "eval_accuracy": metrics.accuracy(labels, predictions)}
    if self.glue_name in ("mrpc", "qqp"):
      results["eval_f1"] = metrics.f1(labels, predictions)
    if self.glue_name == "cola":
      results["eval_mcc"] = metrics.matthews_corrcoef(labels, predictions)
    return results

  def write_predictions(self, logits, output_dir):
    """test_results.tsv (class probabilities, as the original; the score for regression) and the
    GLUE submission file (index<TAB>prediction, label names)."""
    if self.regression:
      values = logits[:, :1]
      predictions = [f"{v:.3f}" for v in logits[:, 0]]
    else:
      values = metrics.softmax(logits)
      predictions = [self.label_list[i] for i in logits.argmax(axis=-1)]
    write_text_atomically(os.path.join(output_dir, "test_results.tsv"), "".join(
        "\t".join(str(p) for p in row) + "\n" for row in values))
    name = self.processor.submission_name
    if name:
      write_text_atomically(os.path.join(output_dir, f"{name}.tsv"), "index\tprediction\n" + "".join(
          f"{i}\t{p}\n" for i, p in enumerate(predictions)))

  # ------------------------------------------------------------------ task_config.json, serving
  def task_config_fields(self):
    return dict(super().task_config_fields(), task_name=self.options.task.task_name)

  @classmethod
  def serving_options(cls, task_options, init_checkpoint=None):
    if not task_options.task_name:
      raise BertTfError(f"--task_name: required with --task={cls.name} (its labels are the GLUE "
                        f"processor's)")
    label_list, pair = classifier_labels(task_options.task_name)
    return {"label_list": label_list, "pair": pair, "regression": label_list is None}

  @classmethod
  def check_task_config(cls, config, task_options, path, directory):
    """A classifier's task_config.json names the GLUE task whose labels --task_name gives."""
    task_name, given = config.get("task_name"), task_options.task_name
    if task_name and given and task_name.lower() != given.lower():
      raise BertTfError(f"--task_name: {path} says {directory} holds a model fine-tuned on "
                        f"{task_name}, not {given}: pass --task_name={task_name}")

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None,
                 causal=False):
    return heads.BertClassifier(config, num_labels=num_labels, trim_padding=trim_padding,
                                bilstm_units=bilstm_units, causal=causal)

  # ------------------------------------------------------------------ reduced precision
  @classmethod
  def _rows(cls, task_options, path, split):
    """(the task of --task_name, its examples in path, the predictor's inputs of them)."""
    if not task_options.task_name:
      raise BertTfError("--task_name: needed to read the classifier's check rows")
    task = cls(types.SimpleNamespace(task=task_options), None)
    examples = task.processor._create_examples(path, split)  # pylint: disable=protected-access
    pair = task.processor.columns[split][3] is not None
    return task, examples, {"texts": [(e.text_a, e.text_b or "") if pair else e.text_a
                                      for e in examples]}

  @classmethod
  def dev_file(cls, task_options):
    data_dir = task_options.data_dir
    return "--data_dir", data_dir and os.path.join(
        data_dir, get_processor(task_options.task_name).dev_file)

  @classmethod
  def check_rows(cls, task_options, path):
    """Scored by the run's eval_metrics on the predictor's probabilities (their logarithms as
    logits: the same argmax and cross-entropy); a row differs when its label (score) does."""
    task, examples, inputs = cls._rows(task_options, path, "dev")
    labels = np.array([e.label if task.regression else task.label_list.index(e.label)
                       for e in examples], np.float64)

    def scores(results):
      if task.regression:
        logits = np.array([[r["score"]] for r in results], np.float64)
      else:
        logits = np.log(np.maximum(np.array([[r["scores"][name] for name in task.label_list]
                                             for r in results], np.float64), 1e-30))
      return task.eval_metrics(logits, labels)

    def same(a, b):
      return a.get("label", a.get("score")) == b.get("label", b.get("score"))

    return base.CheckSet(path, "dev examples", inputs, task.primary_metric, 100.0, scores, same)

  @classmethod
  def calibration_rows(cls, task_options):
    if not task_options.data_dir:
      raise BertTfError("--data_dir: needed to calibrate int8 on the task's training examples")
    path = os.path.join(task_options.data_dir,
                        get_processor(task_options.task_name).train_file)
    fileio.check_input_file(path, "--data_dir")
    return path, cls._rows(task_options, path, "train")[2]


def logits_and_labels(batches):
  """All logits (float64) and labels of the predict batches, in order."""
  logits, labels = [], []
  for batch in batches:
    logits.append(batch["logits"].astype(np.float64))
    labels.append(batch["label_ids"])
  return np.concatenate(logits), np.concatenate(labels).astype(np.float64)

"""SWAG for run_swag.py: csv examples, four sequences per example, TFRecords, and SwagTask (the
task bert_tf.drivers.finetuning runs).

Two csv layouts are read, told apart by their header:
  regular: video-id, fold-ind, startphrase, sent1, sent2, gold-source, ending0..ending3, label
           (test files have no label column);
  full:    ..., gold-ending, distractor-0..distractor-3, ..., sent1, sent2; the gold ending goes to
           a position drawn from --seed among the first num_choices - 1 distractors.
Choice i is the pair A = sent1, B = sent2 + " " + ending_i, laid out as a GLUE pair.
"""
import collections
import csv
import dataclasses
import os
import random
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
from bert_tf.tasks import glue
from bert_tf.tasks import metrics
from bert_tf.training import loop

NUM_CHOICES = 4
REGULAR_COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")
FULL_COLUMNS = ("sent1", "sent2", "gold-ending", "distractor-0", "distractor-1", "distractor-2")


@dataclasses.dataclass(frozen=True)
class SwagOptions:
  """run_swag.py's own flags. The script has no BiLSTM head and no export (SWAG's four endings
  per question have no server)."""
  LACKS = ("bilstm_head", "bilstm_hidden_size", "export_dir", "tflite")

  data_dir: Optional[str] = option(None, "The input data dir. Should contain the SWAG csv "
                                      "files train.csv, val.csv and test.csv (regular or full "
                                      "format).")

  def __post_init__(self):
    fileio.check_data_directory(self.data_dir)


def multiple_choice_features(max_seq_length, num_choices=NUM_CHOICES):
  """The records of run_swag.py (convert_example's): every choice's sequence, flattened
  [num_choices * max_seq_length]."""
  length = num_choices * max_seq_length
  return {
      "input_ids": tf.io.FixedLenFeature([length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.int64),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }


class SwagExample:
  """One SWAG question: the context, the start of the ending, the candidate endings, the label."""

  def __init__(self, guid, context, start_ending, endings, label=None):
    self.guid = guid
    self.context = context
    self.start_ending = start_ending
    self.endings = endings
    self.label = label


def read_swag_examples(input_file, seed=12345):
  """SwagExamples of a regular or full SWAG csv (label 0 where the file has none)."""
  reader = csv.DictReader(read_lines(input_file))
  header = reader.fieldnames or []
  rows = list(reader)
  if all(c in header for c in REGULAR_COLUMNS):
    full = False
  elif all(c in header for c in FULL_COLUMNS):
    full = True
  else:
    raise BertTfError(f"{input_file}: not a SWAG csv; its header needs the columns "
                      f"{', '.join(REGULAR_COLUMNS)}[, label] (regular) or "
                      f"{', '.join(FULL_COLUMNS)} (full); it has {', '.join(header) or 'none'}")
  if not rows:
    raise BertTfError(f"{input_file}: no example (the file holds only its header); expected a "
                      f"row per example")
  rng = random.Random(seed)
  examples = []
  for i, row in enumerate(rows):
    line = i + 2  # the header is line 1
    if None in row or None in row.values():
      count = sum(v is not None for k, v in row.items() if k is not None) + len(row.get(None, []))
      raise BertTfError(f"{input_file}: line {line} has {count} columns where the header has "
                        f"{len(header)}")
    guid = row.get("") or row.get("video-id") or str(i)
    if full:
      endings = [row[f"distractor-{k}"] for k in range(NUM_CHOICES - 1)]
      label = rng.randrange(NUM_CHOICES)
      endings.insert(label, row["gold-ending"])
    else:
      endings = [row[f"ending{k}"] for k in range(NUM_CHOICES)]
      label = row.get("label") or "0"
      if label not in ("0", "1", "2", "3"):
        raise BertTfError(f"{input_file}: line {line}: label {label!r} is not one of 0, 1, 2, 3")
      label = int(label)
    examples.append(SwagExample(guid=f"swag-{guid}", context=row["sent1"],
                                start_ending=row["sent2"], endings=endings, label=label))
  if not examples:
    raise BertTfError(f"{input_file}: no examples")
  return examples


def convert_example(ex_index, example, max_seq_length, tokenizer):
  """The example's four [CLS] context [SEP] start ending [SEP] sequences, flattened."""
  features = collections.OrderedDict(
      [("input_ids", []), ("input_mask", []), ("segment_ids", [])])
  for ending in example.endings:
    pair = glue.InputExample(guid=example.guid, text_a=example.context,
                             text_b=f"{example.start_ending} {ending}".strip(), label="0")
    choice = glue.convert_single_example(ex_index, pair, ["0"], max_seq_length, tokenizer)
    features["input_ids"] += choice.input_ids
    features["input_mask"] += choice.input_mask
    features["segment_ids"] += choice.segment_ids
  features["label_ids"] = [example.label]
  features["is_real_example"] = [1]
  return features


def file_based_convert_examples_to_features(examples, max_seq_length, tokenizer, output_file):
  """Writes multiple_choice_features records, atomically."""

  def feature_dicts():
    for ex_index, example in enumerate(examples):
      if ex_index % 10000 == 0:
        logging.info("Writing example %d of %d", ex_index, len(examples))
      yield convert_example(ex_index, example, max_seq_length, tokenizer)

  return records.write_records(output_file, feature_dicts())


@base.register("swag")
class SwagTask(base.Task):
  """run_swag.py's task for bert_tf.drivers.finetuning: four sequences per example, BertMultipleChoice,
  a softmax over the choices. No serving half (server_class None): "run_swag.py has no export"."""

  script = "run_swag.py"
  # The "export_kind" of its runs' task_config.json before "task" named the task.
  aliases = (None,)
  options_class = SwagOptions
  num_sequences = NUM_CHOICES  # --pack_sequences packs an example's choices into one row
  SPLIT_FILES = {"train": "train.csv", "dev": "val.csv", "test": "test.csv"}

  def schema(self, is_training):
    return multiple_choice_features(self.options.max_seq_length)

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None,
                 causal=False):
    return heads.BertMultipleChoice(config, num_choices=NUM_CHOICES, trim_padding=trim_padding,
                                    bilstm_units=bilstm_units, causal=causal)

  def loss_fn(self, features, outputs):
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label_ids"],
                                                            logits=outputs["logits"])
    return packing_finetune.mean_loss(features, losses)

  def train_metric_fn(self, features, outputs):
    return {"accuracy": (heads.correct_predictions(features["label_ids"], outputs["logits"]),
                         packing_finetune.example_weights(features))}

  def write_train_records(self, path):
    examples = self.write_split_records("train", path)
    return len(examples), len(examples), "training examples"

  def split_file(self, split):
    return "--data_dir", os.path.join(self.options.task.data_dir, self.SPLIT_FILES[split])

  def write_split_records(self, split, path):
    examples = read_swag_examples(os.path.join(self.options.task.data_dir, self.SPLIT_FILES[split]),
                                  seed=self.options.runtime.seed)
    file_based_convert_examples_to_features(examples, self.options.max_seq_length, self.tokenizer,
                                            path)
    return examples

  primary_metric = "eval_accuracy"

  def eval_metric_names(self):
    return ["eval_accuracy", "eval_loss"]

  def finish_split(self, split, examples, batches, global_step, output_dir=None):
    output_dir = output_dir or self.options.output_dir
    logits, labels = glue.logits_and_labels(batches)
    if split == "test":
      self.write_predictions(examples, logits, output_dir)
      return None
    labels = labels.astype(np.int64)
    results = {"eval_loss": metrics.cross_entropy(logits, labels),
               "eval_accuracy": metrics.accuracy(labels, logits.argmax(axis=-1)),
               "global_step": global_step}
    logging.info("***** Eval results (%d examples) *****", len(examples))
    loop.write_eval_results(os.path.join(output_dir, "eval_results.txt"), results)
    return results

  def write_predictions(self, examples, logits, output_dir):
    """test_results.tsv: guid, the four choice probabilities and the predicted choice."""
    probabilities = metrics.softmax(logits)
    lines = ["guid\tprob0\tprob1\tprob2\tprob3\tprediction\n"]
    for example, row in zip(examples, probabilities):
      lines.append("\t".join([example.guid] + [f"{p:.6f}" for p in row]
                             + [str(int(row.argmax()))]) + "\n")
    write_text_atomically(os.path.join(output_dir, "test_results.tsv"),
                          "".join(lines))

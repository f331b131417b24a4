"""Sentence embeddings for run_embeddings.py: a bi-encoder (sentence_encoder.SentenceEncoder: both
texts of a pair through the one encoder, each pooled to a vector) fine-tuned as
sentence-transformers' recipes train one, and EmbeddingTask, the task bert_tf.drivers.finetuning
runs: its flags, records, loss, metric and files; its server: embedding_server.EmbeddingServer.

Data: an STS-B directory in GLUE's layout (--data_dir: train.tsv, dev.tsv, test.tsv; scores 0 to
5), or training pairs of the user's own (--train_file, tab-separated): `text_a, text_b, score`
(the same 0 to 5 scale) or `anchor, positive` (--loss=mnrl). A pair is two records' worth of
sequences, [CLS] text [SEP] each, flattened [2 * max_seq_length] (as SWAG's choices):
--pack_sequences packs both of a pair's sequences into one row.

Losses (--loss): cosine (CosineSimilarityLoss: the squared error of the cosine against score / 5),
cosent (CoSENTLoss: the batch's pairs ranked by their scores) and mnrl (MultipleNegativesRanking:
each pair's positive against the batch's other positives; on STS-B's train.tsv the pairs scored
at least --min_positive_score). Metric: the Spearman correlation of the dev pairs' cosines with
their scores (eval_spearman, as sentence-transformers' EmbeddingSimilarityEvaluator's
spearman_cosine), and Pearson's.
"""
import collections
import csv
import dataclasses
import os
from typing import Optional

from absl import logging
import numpy as np
import tensorflow as tf

from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.fileio import read_lines
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model import model_files
from bert_tf.options import MODEL
from bert_tf.options import TRAINING
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.tasks import base
from bert_tf.tasks import embedding_server
from bert_tf.tasks import glue
from bert_tf.tasks import metrics
from bert_tf.tasks import sentence_encoder
from bert_tf.training import loop
from bert_tf.training import run_dir

MAX_SCORE = 5.0  # STS-B's scores run from 0 (unrelated) to 5 (the same meaning)
DEFAULT_POOLING = "mean"  # sentence-transformers' default


@dataclasses.dataclass(frozen=True)
class EmbeddingOptions:
  """run_embeddings.py's own flags (--pooling also export_savedmodel.py's, for --task=embeddings),
  and the rules on their values. A bi-encoder has no BiLSTM head; its training defaults are
  sentence-transformers' STS-B recipe's (batch 16, 4 epochs, learning rate 2e-5)."""
  LACKS = ("bilstm_head", "bilstm_hidden_size")
  DEFAULTS = {"train_batch_size": 16, "num_train_epochs": 4.0, "learning_rate": 2e-5}

  data_dir: Optional[str] = option(None, "The STS-B directory, in GLUE's layout: train.tsv "
                                   "(unless --train_file), dev.tsv (--do_eval and "
                                   "--eval_every_n_steps: the Spearman correlation of the "
                                   "pairs' cosines with their scores) and test.tsv "
                                   "(--do_predict).")
  train_file: Optional[str] = option(None, "Training pairs instead of --data_dir's train.tsv: "
                                     "tab-separated lines `text_a, text_b, score` (scores 0 "
                                     "to 5, as STS-B's) or `anchor, positive` (for "
                                     "--loss=mnrl).")
  loss: str = option("cosent", "cosine: the squared error of the pair's cosine against its "
                     "score / 5 (sentence-transformers' CosineSimilarityLoss); cosent: the "
                     "batch's pairs ranked by their scores (CoSENTLoss); mnrl: each anchor's "
                     "positive against the batch's other positives, in-batch negatives "
                     "(MultipleNegativesRankingLoss).", TRAINING, choices=sentence_encoder.LOSSES)
  pooling: Optional[str] = option(
      None, "How a text's token vectors make its vector: cls (the [CLS] token's), mean, max or "
      "mean_sqrt_len. Default: the model's own (a sentence-transformers directory's "
      "1_Pooling), else mean.", MODEL, choices=sentence_encoder.POOLINGS,
      export="--task=embeddings: the pooling (default: the model's own, as its run recorded it "
             "or a sentence-transformers directory says; else mean).")
  similarity_scale: float = option(20.0, "--loss=cosent and mnrl: the factor on the cosines "
                                   "before their softmax (sentence-transformers' scale).",
                                   TRAINING, above_zero=True)
  min_positive_score: float = option(4.0, "--loss=mnrl on --data_dir's train.tsv: the pairs "
                                     "scored at least this are the positive pairs.")

  def __post_init__(self):
    check_fields(self)
    fileio.check_data_directory(self.data_dir)
    if not 0 <= self.min_positive_score <= MAX_SCORE:
      raise BertTfError(f"--min_positive_score: expected a score from 0 to {MAX_SCORE:g}, got "
                        f"{self.min_positive_score}")


def own_pooling(init_checkpoint):
  """(the pooling the model at init_checkpoint was made with, or None; what of its pooling
  bert_tf does not compute, or None): its fine-tuning run's pooling (the task_config.json of an
  output_dir of this task, or beside a checkpoint in one), or a sentence-transformers
  directory's."""
  if not init_checkpoint:
    return None, None
  directory = (init_checkpoint if tf.io.gfile.isdir(init_checkpoint)
               else os.path.dirname(init_checkpoint))
  recorded = run_dir.RunDir(directory or ".").task_config
  if recorded and recorded.get("pooling") in sentence_encoder.POOLINGS:
    return recorded["pooling"], None
  described = model_files.describe(init_checkpoint)
  extras = described.extras if described else {}
  return extras.get("pooling"), extras.get("unsupported")


def resolve_pooling(pooling, init_checkpoint):
  """--pooling, or else the model's own (own_pooling), or else DEFAULT_POOLING. A flag other than
  the model's own is logged (the vectors then differ from those it was trained to give); a model
  that pools in a way bert_tf does not compute needs the flag (a BertTfError)."""
  own, unsupported = own_pooling(init_checkpoint)
  if pooling and own and pooling != own:
    logging.warning("--pooling=%s: %s was made with %s pooling; its vectors are pooled otherwise "
                    "here", pooling, init_checkpoint, own)
  if not pooling and unsupported:
    raise BertTfError(f"--pooling: {unsupported}, which bert_tf does not compute: pass "
                      f"--pooling={'|'.join(sentence_encoder.POOLINGS)} to pool its encoder so")
  return pooling or own or DEFAULT_POOLING


# ---------------------------------------------------------------------------- data

Pair = collections.namedtuple("Pair", ["guid", "text_a", "text_b", "score"])


def stsb_pairs(data_dir, split):
  """The Pairs of an STS-B split file (test: score 0.0, the file has none)."""
  processor = glue.get_processor("sts-b")
  examples = getattr(processor, f"get_{split}_examples")(data_dir)
  return [Pair(e.guid, e.text_a, e.text_b, float(e.label)) for e in examples]


def read_pair_file(path):
  """(Pairs, whether they are scored) of a --train_file: tab-separated `text_a, text_b, score`
  lines, or `anchor, positive` (score None); every line of one kind, blank lines skipped."""
  pairs, width = [], None
  for i, row in enumerate(csv.reader(read_lines(path, "--train_file"), delimiter="\t",
                                     quotechar=None)):
    if not "".join(row).strip():
      continue
    if width is None:
      width = len(row)
      if width not in (2, 3):
        raise BertTfError(f"--train_file: {path}: line {i + 1} has {width} tab-separated columns, "
                          f"expected 3 (text_a, text_b, score) or 2 (anchor, positive)")
    if len(row) != width:
      raise BertTfError(f"--train_file: {path}: line {i + 1} has {len(row)} tab-separated "
                        f"columns where the first line has {width}")
    score = None
    if width == 3:
      try:
        score = float(row[2])
      except ValueError:
        raise BertTfError(f"--train_file: {path}: line {i + 1}: score {row[2]!r} is not a "
                          f"number") from None
      if not 0 <= score <= MAX_SCORE:
        raise BertTfError(f"--train_file: {path}: line {i + 1}: score {score:g} is not from 0 "
                          f"to {MAX_SCORE:g}")
    pairs.append(Pair(f"train-{i}", row[0], row[1], score))
  if not pairs:
    raise BertTfError(f"--train_file: {path} holds no pair")
  return pairs, width == 3


def pair_features(max_seq_length):
  """The records of run_embeddings.py: both texts' sequences, flattened [2 * max_seq_length],
  and the score scaled to [0, 1] (0.0 for unscored pairs)."""
  length = 2 * max_seq_length
  return {
      "input_ids": tf.io.FixedLenFeature([length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([], tf.float32),
      "is_real_example": tf.io.FixedLenFeature([], tf.int64),
  }


def write_pair_records(pairs, max_seq_length, tokenizer, path):
  """Writes pair_features records of the Pairs, atomically; returns how many."""

  def feature_dicts():
    for i, pair in enumerate(pairs):
      features = collections.OrderedDict(
          [("input_ids", []), ("input_mask", []), ("segment_ids", [])])
      for text in (pair.text_a, pair.text_b):
        sequence = glue.convert_single_example(i, glue.InputExample(pair.guid, text, label=0.0),
                                               [None], max_seq_length, tokenizer)
        features["input_ids"] += sequence.input_ids
        features["input_mask"] += sequence.input_mask
        features["segment_ids"] += sequence.segment_ids
      features["label_ids"] = [(pair.score or 0.0) / MAX_SCORE]
      features["is_real_example"] = [1]
      yield features

  return records.write_records(path, feature_dicts())


# ---------------------------------------------------------------------------- the task


@base.register("embeddings")
class EmbeddingTask(base.Task):
  """run_embeddings.py's task for bert_tf.drivers.finetuning (see the module docstring); served by
  embedding_server.EmbeddingServer (texts -> unit-length vectors)."""

  script = "run_embeddings.py"
  options_class = EmbeddingOptions
  server_class = embedding_server.EmbeddingServer
  num_sequences = 2  # --pack_sequences packs a pair's two sequences into one row
  primary_metric = "eval_spearman"
  run_keys = ("pooling",)

  def __init__(self, options, tokenizer):
    super().__init__(options, tokenizer)
    own = options.task
    if not own.data_dir and not own.train_file:
      raise BertTfError("--data_dir: required (the STS-B directory), unless --train_file gives "
                        "the training pairs and nothing is evaluated")
    self.pooling = resolve_pooling(own.pooling, options.init_checkpoint)

  def schema(self, is_training):
    return pair_features(self.options.max_seq_length)

  def split_file(self, split):
    if split == "train" and self.options.task.train_file:
      return "--train_file", self.options.task.train_file
    if not self.options.task.data_dir:
      raise BertTfError(f"--data_dir: required for the {split} split (the STS-B directory)")
    return "--data_dir", os.path.join(self.options.task.data_dir, f"{split}.tsv")

  def training_pairs(self):
    """The training Pairs the loss reads: mnrl's positives, or the scored pairs."""
    own = self.options.task
    if own.train_file:
      pairs, scored = read_pair_file(own.train_file)
      if not scored and own.loss != "mnrl":
        raise BertTfError(f"--loss: {own.loss} learns from scores, and --train_file "
                          f"{own.train_file} holds pairs without one: use --loss=mnrl, or add "
                          f"a score column")
      return pairs if own.loss != "mnrl" or not scored else self._positives(pairs)
    pairs = stsb_pairs(own.data_dir, "train")
    return self._positives(pairs) if own.loss == "mnrl" else pairs

  def _positives(self, pairs):
    threshold = self.options.task.min_positive_score
    positives = [p for p in pairs if p.score is None or p.score >= threshold]
    if not positives:
      raise BertTfError(f"--min_positive_score: no training pair is scored at least "
                        f"{threshold:g}")
    logging.info("--loss=mnrl: %d of %d training pairs scored at least %g are the positives",
                 len(positives), len(pairs), threshold)
    return positives

  def write_train_records(self, path):
    count = write_pair_records(self.training_pairs(), self.options.max_seq_length,
                               self.tokenizer, path)
    return count, count, "training pairs"

  def write_split_records(self, split, path):
    pairs = stsb_pairs(self.options.task.data_dir, split)
    write_pair_records(pairs, self.options.max_seq_length, self.tokenizer, path)
    return pairs

  def model_fn(self, config, trim_padding=False):
    return lambda: sentence_encoder.SentenceEncoder(
        config, pooling=self.pooling, normalize=True, num_sequences=2, trim_padding=trim_padding,
        causal=bool(self.options.left_to_right))

  def loss_fn(self, features, outputs):
    """The --loss of the batch's pairs: cosine's mean over the pairs (packed rows:
    packing_finetune.mean_loss), cosent's and mnrl's over the micro-batch's pairs at once."""
    own = self.options.task
    vectors = outputs["embeddings"]
    vectors = tf.reshape(vectors, [-1, 2, vectors.shape[-1]])  # packed [B, K, 2, H] too
    weights = packing_finetune.example_weights(features)
    flat_weights = None if weights is None else tf.reshape(weights, [-1])
    losses = sentence_encoder.pair_loss(own.loss, vectors[:, 0], vectors[:, 1],
                                        tf.reshape(features["label_ids"], [-1]), flat_weights,
                                        own.similarity_scale)
    if own.loss != "cosine":
      return losses
    return packing_finetune.mean_loss(features, tf.reshape(losses, tf.shape(features["label_ids"])))

  def eval_metric_names(self):
    return ["eval_pearson", "eval_spearman"]

  def finish_split(self, split, pairs, batches, global_step, output_dir=None):
    output_dir = output_dir or self.options.output_dir
    similarities, labels = [], []
    for batch in batches:
      similarities.append(batch["similarity"].astype(np.float64))
      labels.append(batch["label_ids"].astype(np.float64))
    similarities, labels = np.concatenate(similarities), np.concatenate(labels)
    if split == "test":
      write_text_atomically(os.path.join(output_dir, "test_results.tsv"),
                            "".join(f"{s:.6f}\n" for s in similarities))
      return None
    results = {"eval_pearson": metrics.pearson(labels, similarities),
               "eval_spearman": metrics.spearman(labels, similarities),
               "global_step": global_step}
    logging.info("***** Eval results (%d pairs) *****", len(pairs))
    loop.write_eval_results(os.path.join(output_dir, "eval_results.txt"), results)
    return results

  # ------------------------------------------------------------------ task_config.json, serving
  def task_config_fields(self):
    return {"pooling": self.pooling, "loss": self.options.task.loss}

  @classmethod
  def serving_options(cls, task_options, init_checkpoint=None):
    return {"pooling": resolve_pooling(task_options.pooling, init_checkpoint)}

  @classmethod
  def check_task_config(cls, config, task_options, path, directory):
    """A run's pooling is its model's: --pooling may only agree with it."""
    pooling, given = config.get("pooling"), task_options.pooling
    if pooling and given and pooling != given:
      raise BertTfError(f"--pooling: {path} says {directory} was fine-tuned with {pooling} "
                        f"pooling, not {given}: leave --pooling out")

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None,
                 causal=False):
    """The export's model: the encoder's token vectors (its server pools them)."""
    if bilstm_units:
      raise BertTfError("--bilstm_head: a sentence encoder has no BiLSTM")
    return sentence_encoder.SentenceEncoder(config, pooling=None, trim_padding=trim_padding,
                                            causal=causal)

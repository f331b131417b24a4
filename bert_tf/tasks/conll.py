"""CoNLL-2003 NER for run_ner.py: read the column format, make windowed features labelled on first
sub-tokens (tagging_features), score entities (bert_tf.tasks.conlleval), write predictions back in
the format conlleval reads, and NerTask (the task bert_tf.drivers.finetuning runs; its server:
ner_server.NerServer).

The paper (section 5.3) feeds each WordPiece-tokenized word to BERT and labels only its first
sub-token; the other sub-tokens are "X": no label, no loss, no prediction.
"""
import collections
import dataclasses
import os
import re
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data import packing_finetune
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.fileio import atomic_output
from bert_tf.io.fileio import read_lines
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model import heads
from bert_tf.options import option
from bert_tf.tasks import base
from bert_tf.tasks import conlleval
from bert_tf.tasks import metrics
from bert_tf.tasks import ner_server
from bert_tf.training import loop

DOCSTART = "-DOCSTART-"
# Columns are separated by spaces or tabs: only those, never the other characters Python counts as
# whitespace (U+00A0, U+2028, U+0085, \x1c ...), which a word may hold.
_COLUMN_SPACE = " \t\n"
_COLUMNS = re.compile(r"[^ \t\n]+")
_TAG = re.compile(r"^(O|[BIES]-\S+)$")

# One sentence of a CoNLL file. `lines` are the original lines (all columns) to write back with a
# predicted tag; `docstarts` are the -DOCSTART- lines that came just before it.
Sentence = collections.namedtuple("Sentence", ["words", "tags", "lines", "line_numbers",
                                               "docstarts"])

# One window of one sentence. Position token_positions[k] holds the first sub-token of word
# word_indexes[k] of sentence sentence_index; only those positions have label_weights 1.
TaggingFeatures = collections.namedtuple("TaggingFeatures", [
    "input_ids", "input_mask", "segment_ids", "label_ids", "label_weights", "sentence_index",
    "word_indexes", "token_positions"])


def read_conll(path):
  """CoNLL columns (word first, tag last, blank line between sentences) -> list of Sentence."""
  sentences = []
  num_columns, first_line = None, None
  words, tags, lines, numbers, docstarts = [], [], [], [], []
  docstarts_inside, blank_runs, previous_blank = 0, 0, False

  def end_sentence():
    if words:
      sentences.append(Sentence(list(words), list(tags), list(lines), list(numbers),
                                list(docstarts)))
      docstarts.clear()
    for part in (words, tags, lines, numbers):
      part.clear()

  for number, raw in enumerate(read_lines(path), 1):
    line = raw.strip(_COLUMN_SPACE)
    if not line:
      blank_runs += previous_blank
      previous_blank = True
      end_sentence()
      continue
    previous_blank = False
    columns = _COLUMNS.findall(line)
    if columns[0] == DOCSTART:
      # A document boundary is also a sentence boundary, wherever it appears.
      if words:
        docstarts_inside += 1
        end_sentence()
      docstarts.append(line)
      continue
    if num_columns is None:
      if len(columns) < 2:
        raise BertTfError(f"{path}:{number}: expected at least 2 columns (word ... tag), "
                          f"got {len(columns)}: {line!r}")
      num_columns, first_line = len(columns), number
    elif len(columns) != num_columns:
      raise BertTfError(f"{path}:{number}: expected {num_columns} columns (as on line "
                        f"{first_line}), got {len(columns)}: {line!r}")
    if not _TAG.match(columns[-1]):
      raise BertTfError(f"{path}:{number}: tag {columns[-1]!r} (last column) is not O or "
                        f"B-/I-/E-/S-<type>")
    words.append(columns[0])
    tags.append(columns[-1])
    lines.append(line)
    numbers.append(number)
  end_sentence()
  if docstarts:
    logging.info("%s: %d %s line(s) at the end of the file, with no sentence after them, ignored",
                 path, len(docstarts), DOCSTART)
  if docstarts_inside:
    logging.warning("%s: %d %s line(s) inside a sentence; treated as sentence boundaries", path,
                    docstarts_inside, DOCSTART)
  if blank_runs:
    logging.info("%s: skipped %d empty sentence block(s) (repeated blank lines)", path, blank_runs)
  if not sentences:
    raise BertTfError(f"{path}: no sentences found (expected CoNLL columns: word ... tag, one "
                      f"word a line, a blank line between sentences)")
  return sentences


def detect_scheme(sentences):
  """'IOBES', 'IOB1' (I- may open an entity) or 'IOB2' (every entity opens with B-)."""
  for sentence in sentences:
    if any(tag[:2] in ("E-", "S-") for tag in sentence.tags):
      return "IOBES"
  for sentence in sentences:
    previous = "O"
    for tag in sentence.tags:
      if tag.startswith("I-") and previous[2:] != tag[2:]:
        return "IOB1"
      previous = tag
  return "IOB2"


def get_labels(sentences):
  """The label set of the training sentences: "O" first, then sorted, so ids are stable."""
  tags = {tag for sentence in sentences for tag in sentence.tags}
  return ["O"] * ("O" in tags) + sorted(tags - {"O"})


def word_pieces(words, tokenizer, max_tokens):
  """Each word's WordPieces (never empty: [UNK] for a word the tokenizer drops), at most
  max_tokens of them; the first piece, the one labelled, is always kept."""
  return [(tokenizer.tokenize(word) or ["[UNK]"])[:max_tokens] for word in words]


def window_spans(piece_counts, max_tokens):
  """Splits a sentence into windows of at most max_tokens pieces: [(first, start, end, last)].

  Words [start, end) are labelled in that window; words [first, start) and [end, last) are context
  only. Every word is labelled in exactly one window; a sentence that fits is one window.
  """
  n = len(piece_counts)
  if sum(piece_counts) <= max_tokens:
    return [(0, 0, n, n)]
  # Labelled chunks of at most half a window leave the other half for context on both sides.
  chunks, start, used = [], 0, 0
  for i, count in enumerate(piece_counts):
    if i > start and used + count > max_tokens // 2:
      chunks.append((start, i))
      start, used = i, 0
    used += count
  chunks.append((start, n))
  spans = []
  for start, end in chunks:
    room = max_tokens - sum(piece_counts[start:end])
    first, last = start, end
    left = room // 2
    while first > 0 and piece_counts[first - 1] <= left:
      first -= 1
      left -= piece_counts[first]
      room -= piece_counts[first]
    while last < n and piece_counts[last] <= room:
      room -= piece_counts[last]
      last += 1
    spans.append((first, start, end, last))
  return spans


def convert_sentences_to_features(sentences, label_list, max_seq_length, tokenizer,
                                  source="sentences"):
  """Sentences -> list of TaggingFeatures, one per window. Tags outside label_list are reported
  (they get weight 0, so they add no loss; scoring still counts them against the gold file)."""
  label_map = {label: i for i, label in enumerate(label_list)}
  max_tokens = max_seq_length - 2
  unknown = collections.Counter()
  first_unknown = {}
  features, num_split = [], 0
  for sentence_index, sentence in enumerate(sentences):
    pieces = word_pieces(sentence.words, tokenizer, max_tokens)
    spans = window_spans([len(p) for p in pieces], max_tokens)
    num_split += len(spans) > 1
    for first, start, end, last in spans:
      tokens, label_ids, label_weights = ["[CLS]"], [0], [0.0]
      word_indexes, token_positions = [], []
      for w in range(first, last):
        if start <= w < end:
          tag = sentence.tags[w]
          if tag not in label_map:
            unknown[tag] += 1
            first_unknown.setdefault(tag, sentence.line_numbers[w])
          word_indexes.append(w)
          token_positions.append(len(tokens))
          label_ids.append(label_map.get(tag, 0))
          label_weights.append(1.0 if tag in label_map else 0.0)
          label_ids.extend([0] * (len(pieces[w]) - 1))
          label_weights.extend([0.0] * (len(pieces[w]) - 1))
        else:
          label_ids.extend([0] * len(pieces[w]))
          label_weights.extend([0.0] * len(pieces[w]))
        tokens.extend(pieces[w])
      tokens.append("[SEP]")
      label_ids.append(0)
      label_weights.append(0.0)
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      padding = max_seq_length - len(input_ids)
      features.append(TaggingFeatures(
          input_ids=input_ids + [0] * padding,
          input_mask=[1] * len(input_ids) + [0] * padding,
          segment_ids=[0] * max_seq_length,
          label_ids=label_ids + [0] * padding,
          label_weights=label_weights + [0.0] * padding,
          sentence_index=sentence_index, word_indexes=word_indexes,
          token_positions=token_positions))
  if num_split:
    logging.info("%s: %d sentence(s) longer than max_seq_length=%d split into windows", source,
                 num_split, max_seq_length)
  if unknown:
    logging.warning("%s: %d word(s) with tags not in the training label set %s: %s", source,
                    sum(unknown.values()), label_list,
                    ", ".join(f"{tag!r} x{n} (first on line {first_unknown[tag]})"
                              for tag, n in sorted(unknown.items())))
  return features


def tagging_features(max_seq_length):
  """The records of run_ner.py (feature_values'): a label per position, weight 1 only on each
  word's first sub-token."""
  return {
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "label_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "label_weights": tf.io.FixedLenFeature([max_seq_length], tf.float32),
  }


def feature_values(feature):
  """The record of one TaggingFeatures, in tagging_features' order."""
  return collections.OrderedDict([
      ("input_ids", feature.input_ids), ("input_mask", feature.input_mask),
      ("segment_ids", feature.segment_ids), ("label_ids", feature.label_ids),
      ("label_weights", feature.label_weights)])


def write_records(features, path):
  return records.write_records(path, map(feature_values, features))


def predictions_to_tags(sentences, features, predicted_ids, label_list):
  """Per-window predicted label ids [num_windows, T] -> one predicted tag per word per sentence."""
  tags = [[None] * len(sentence.words) for sentence in sentences]
  if len(predicted_ids) != len(features):
    raise BertTfError(f"got {len(predicted_ids)} predictions for {len(features)} windows")
  for feature, ids in zip(features, predicted_ids):
    for w, position in zip(feature.word_indexes, feature.token_positions):
      tags[feature.sentence_index][w] = label_list[int(ids[position])]
  missing = sum(tag is None for sentence_tags in tags for tag in sentence_tags)
  if missing:
    raise BertTfError(f"{missing} word(s) got no prediction (windows do not cover the sentences)")
  return tags


def write_predictions(path, sentences, predicted_tags):
  """The input file with a predicted-tag column appended: `word ... gold predicted`, as conlleval
  reads it; -DOCSTART- lines are kept as `-DOCSTART- -X- ... O O`, which conlleval scores as O/O."""
  with atomic_output(path) as tmp:
    with tf.io.gfile.GFile(tmp, "w") as writer:
      for sentence, tags in zip(sentences, predicted_tags):
        # conlleval wants the same number of columns on every line, -DOCSTART- lines included.
        docstart = " ".join([DOCSTART] + ["-X-"] * (len(sentence.lines[0].split()) - 2) + ["O"])
        for _ in sentence.docstarts:
          writer.write(f"{docstart} O\n\n")
        for line, tag in zip(sentence.lines, tags):
          writer.write(f"{line} {tag}\n")
        writer.write("\n")


# ---------------------------------------------------------------------------------------------
# run_ner.py's task for bert_tf.drivers.finetuning.

SPLIT_FILES = {"train": "train.txt", "dev": "valid.txt", "test": "test.txt"}
# The training file's labels, saved in output_dir by training and read back by eval, predict and
# export (whose models need the same label ids).
LABEL_LIST_FILE = "label_list.txt"


def read_split(data_dir, split):
  path = os.path.join(data_dir, SPLIT_FILES[split])
  if not tf.io.gfile.exists(path):
    raise BertTfError(f"--data_dir: {path} not found (expected {', '.join(SPLIT_FILES.values())} "
                      f"in CoNLL column format)")
  return path, read_conll(path)


def read_label_list(path, flag="--label_file"):
  """One label a line, as training writes output_dir/label_list.txt."""
  if not tf.io.gfile.exists(path):
    raise BertTfError(f"{flag}: {path} not found")
  labels = [line.strip() for line in read_lines(path, flag) if line.strip()]
  if not labels:
    raise BertTfError(f"{flag}: {path} holds no label")
  return labels


def _predicted_ids(batches):
  """Argmax label ids [num_windows, T], and the loss over the labelled words."""
  ids, logits_all, labels, weights = [], [], [], []
  for batch in batches:
    logits = batch["logits"].astype(np.float64)
    ids.append(logits.argmax(axis=-1))
    logits_all.append(logits)
    labels.append(batch["label_ids"])
    weights.append(batch["label_weights"])
  loss = metrics.cross_entropy(np.concatenate(logits_all), np.concatenate(labels),
                               np.concatenate(weights))
  return np.concatenate(ids), loss


@dataclasses.dataclass(frozen=True)
class NerOptions:
  """run_ner.py's own flags (and export_savedmodel.py's --label_file for --task=ner)."""
  HELP = {"max_seq_length": "The maximum total input sequence length after WordPiece "
                            "tokenization. Longer sentences are split into windows, each word "
                            "predicted in exactly one of them."}

  data_dir: Optional[str] = option(
      None, "The input data dir, with train.txt, valid.txt and test.txt in CoNLL column format "
      "(word first, NER tag last, IOB1 or IOB2).", export=base.DATA_DIR_EXPORT)
  feature_based: bool = option(
      False, "Freeze BERT and train a two-layer BiLSTM over --feature_layers (the paper's "
      "feature-based approach) instead of fine-tuning.", group="model")
  feature_layers: str = option("concat_last_four", "With --feature_based: which BERT "
                                  "activations feed the BiLSTM.", choices=heads.FEATURE_LAYERS,
                                  group="model")
  lstm_units: int = option(768, "With --feature_based: units per direction of each BiLSTM "
                              "layer.", group="model")
  label_file: Optional[str] = option(
      None, "--task=ner: the label list, one a line (default: label_list.txt in "
      "--init_checkpoint, as run_ner.py writes it).", run=False, export=True)

  def __post_init__(self):
    fileio.check_data_directory(self.data_dir)
    if self.feature_based and self.feature_layers not in heads.FEATURE_LAYERS:
      raise BertTfError(f"--feature_layers: {self.feature_layers!r} is not one of "
                        f"{heads.FEATURE_LAYERS}")


@base.register("ner")
class NerTask(base.Task):
  """CoNLL-2003 NER: fine-tuning (one linear layer over the sequence output, the paper's Table 3)
  or, with --feature_based, a two-layer BiLSTM over frozen BERT layers (Table 7); scored with
  CoNLL entity-level F1. Only each word's first sub-token carries a label, a loss and a
  prediction. Served by ner_server.NerServer (text -> words and tags), fine-tuned only."""

  script = "run_ner.py"
  options_class = NerOptions
  distillable = True
  server_class = ner_server.NerServer
  run_keys = ("label_list", "feature_based")
  primary_metric = "eval_f1"

  def __init__(self, options, tokenizer):
    ner = options.task
    if ner.feature_based and options.export_dir:
      raise BertTfError("--export_dir: not supported with --feature_based")
    if ner.feature_based and options.left_to_right:
      raise BertTfError("--left_to_right: not with --feature_based (its features come from the "
                        "bidirectional encoder)")
    if ner.feature_based and options.pack_sequences:
      raise BertTfError("--pack_sequences: not with --feature_based (its BiLSTMs would read "
                        "across the sentences of a row)")
    if ner.feature_based and options.bilstm_head:
      raise BertTfError("--bilstm_head: not with --feature_based, which has BiLSTMs of its own "
                        "(--lstm_units)")
    super().__init__(options, tokenizer)
    self.label_list, self.train_sentences = self._label_list()

  def _label_list(self):
    """The training file's labels, or those a training run saved in output_dir."""
    saved = os.path.join(self.options.output_dir, LABEL_LIST_FILE)
    if not self.options.do_train and tf.io.gfile.exists(saved):
      return read_label_list(saved, "--output_dir"), None
    path, sentences = read_split(self.options.task.data_dir, "train")
    label_list = get_labels(sentences)
    logging.info("%s: tag scheme %s, labels %s", path, detect_scheme(sentences), label_list)
    return label_list, sentences

  def adopt_labels(self, labels, whose):
    """Trains on `labels` (a teacher's, a superset of the training file's tags: a distilled
    student predicts what its teacher does); a training tag outside them is a BertTfError naming
    the training file and its line, and `whose` labels they are."""
    path = os.path.join(self.options.task.data_dir, SPLIT_FILES["train"])
    for sentence in self.train_sentences or []:
      for tag, number in zip(sentence.tags, sentence.line_numbers):
        if tag not in labels:
          raise BertTfError(f"{path}:{number}: tag {tag!r} is not one of {whose} labels "
                            f"({', '.join(labels)}): a student learns its teacher's tags only")
    self.label_list = list(labels)

  def schema(self, is_training):
    return tagging_features(self.options.max_seq_length)

  def model_fn(self, config, trim_padding=False):
    ner, num_labels = self.options.task, len(self.label_list)
    if ner.feature_based:
      return lambda: heads.BertFeatureTagger(
          config, num_labels, trim_padding=trim_padding, feature_layers=ner.feature_layers,
          lstm_units=ner.lstm_units)
    return super().model_fn(config, trim_padding)

  # Packed rows (--pack_sequences): the loss is a mean over the words of the step.
  packed_loss_weights = "label_weights"

  def loss_fn(self, features, outputs):
    """Cross-entropy averaged over the words (first sub-tokens) of the batch (packed rows: of
    the optimizer step, packing_finetune.mean_loss)."""
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=features["label_ids"],
                                                            logits=outputs["logits"])
    return packing_finetune.mean_loss(features, losses, features["label_weights"])

  def train_metric_fn(self, features, outputs):
    correct = heads.correct_predictions(features["label_ids"], outputs["logits"])
    return {"word_accuracy": (tf.reshape(correct, [-1]),
                              tf.reshape(features["label_weights"], [-1]))}

  def write_train_records(self, path):
    write_text_atomically(os.path.join(self.options.output_dir, LABEL_LIST_FILE),
                          "".join(label + "\n" for label in self.label_list))
    features = convert_sentences_to_features(self.train_sentences, self.label_list,
                                             self.options.max_seq_length, self.tokenizer,
                                             source="train.txt")
    write_records(features, path)
    logging.info("  Num sentences = %d (%d windows)", len(self.train_sentences), len(features))
    return len(features), len(features), "training windows"

  def write_transfer_records(self, path, transfer_file):
    """Distillation's unlabelled transfer set (bert_tf.drivers.distillation): CoNLL lines without
    tags (the word first, other columns ignored, a blank line between sentences), written as
    windows whose words carry the first label as a placeholder; returns how many."""
    sentences, words = [], []
    for line in list(read_lines(transfer_file)) + [""]:
      columns = _COLUMNS.findall(line)
      if columns and columns[0] != DOCSTART:
        words.append(columns[0])
      elif words:
        sentences.append(Sentence(words, [self.label_list[0]] * len(words), [], [], []))
        words = []
    if not sentences:
      raise BertTfError(f"--transfer_file: {transfer_file} holds no sentence (a word a line, "
                        f"a blank line between sentences)")
    features = convert_sentences_to_features(sentences, self.label_list,
                                             self.options.max_seq_length, self.tokenizer,
                                             source=transfer_file)
    return write_records(features, path)

  def split_file(self, split):
    return "--data_dir", os.path.join(self.options.task.data_dir, SPLIT_FILES[split])

  def write_split_records(self, split, path):
    source, sentences = read_split(self.options.task.data_dir, split)
    features = convert_sentences_to_features(sentences, self.label_list,
                                             self.options.max_seq_length, self.tokenizer,
                                             source=source)
    write_records(features, path)
    return source, sentences, features

  def eval_metric_names(self):
    """What finish_split reports for the dev set: the overall and per entity type scores, and
    the loss."""
    return sorted(conlleval.result_names(self.label_list)) + ["eval_loss"]

  def finish_split(self, split, state, batches, global_step, output_dir=None):
    source, sentences, features = state
    predicted_ids, loss = _predicted_ids(batches)
    predicted_tags = predictions_to_tags(sentences, features, predicted_ids, self.label_list)
    scores = conlleval.entity_scores([s.tags for s in sentences], predicted_tags)
    prefix = "eval" if split == "dev" else "test"
    results = conlleval.scores_to_results(scores, prefix=prefix)
    results[f"{prefix}_loss"] = loss
    results["global_step"] = global_step
    logging.info("***** %s results (%d sentences, %s) *****\n%s", source, len(sentences),
                 detect_scheme(sentences), conlleval.format_report(scores))
    output_dir = output_dir or self.options.output_dir
    # The conlleval table above is the log's; each figure is in the file.
    loop.write_eval_results(os.path.join(output_dir, f"{prefix}_results.txt"), results, log=False)
    if split == "test":
      write_predictions(os.path.join(output_dir, "test_predictions.txt"), sentences,
                        predicted_tags)
    return results

  def headline(self, split, results):
    """Entity-level F1, precision and recall (dev: eval_*, test: test_*)."""
    prefix = "eval" if split == "dev" else "test"
    return {name: results[name] for name in (f"{prefix}_f1", f"{prefix}_precision",
                                             f"{prefix}_recall") if name in results}

  # ------------------------------------------------------------------ task_config.json, serving
  def task_config_fields(self):
    return {"label_list": list(self.label_list),
            "feature_based": bool(self.options.task.feature_based)}

  # ------------------------------------------------------------------ reduced precision
  @classmethod
  def dev_file(cls, task_options):
    data_dir = task_options.data_dir
    return "--data_dir", data_dir and os.path.join(data_dir, SPLIT_FILES["dev"])

  @classmethod
  def check_rows(cls, task_options, path):
    """Scored by conlleval's entity F1; a sentence differs when one of its tags does."""
    sentences = read_conll(path)
    gold = [s.tags for s in sentences]

    def scores(results):
      predicted = [[tag for _, tag in result] for result in results]
      return conlleval.scores_to_results(conlleval.entity_scores(gold, predicted))

    return base.CheckSet(path, "sentences", {"texts": [" ".join(s.words) for s in sentences]},
                         "eval_f1", 100.0, scores, lambda a, b: a == b)

  @classmethod
  def calibration_rows(cls, task_options):
    if not task_options.data_dir:
      raise BertTfError("--data_dir: needed to calibrate int8 on the task's training examples")
    path, sentences = read_split(task_options.data_dir, "train")
    return path, {"texts": [" ".join(s.words) for s in sentences]}

  @classmethod
  def unservable(cls, config):
    return "feature-based NER" if config.get("feature_based") else None

  @classmethod
  def serving_options(cls, task_options, init_checkpoint=None):
    """--label_file, else label_list.txt in --init_checkpoint (run_ner's output_dir)."""
    label_file = task_options.label_file
    if not label_file and init_checkpoint and tf.io.gfile.isdir(init_checkpoint):
      label_file = os.path.join(init_checkpoint, LABEL_LIST_FILE)
    if not label_file:
      raise BertTfError("--label_file: required with --task=ner unless --init_checkpoint is "
                        "run_ner's output_dir (which holds label_list.txt)")
    return {"label_list": read_label_list(label_file)}

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None,
                 causal=False):
    return heads.BertTokenClassifier(config, num_labels, trim_padding=trim_padding,
                                     bilstm_units=bilstm_units, causal=causal)

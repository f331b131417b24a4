"""SQuAD 1.1 / 2.0 for run_squad.py: read the official JSON, make windowed features and their
records (squad_features), and SquadTask (the task bert_tf.drivers.finetuning runs: its flags and
their rules; answers come from squad_answers.py, its server is squad_server.SquadServer).

The same data path as the original run_squad.py: the context is split on whitespace (keeping a
character -> word map so character-based answers become word spans), each word is WordPiece
tokenized, the answer span is tightened in word pieces, and long contexts are cut into windows of
`doc_stride`; each token is scored only in the window where it has the most context.
"""
import collections
import dataclasses
import json
import random
from typing import Optional

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.model import heads
from bert_tf.options import OUTPUT
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.tasks import base
from bert_tf.tasks import squad_answers
from bert_tf.tasks import squad_metrics
from bert_tf.tasks import squad_server
from bert_tf.text import tokenization

FIRST_UNIQUE_ID = 1000000000

SquadExample = collections.namedtuple(
    "SquadExample", ["qas_id", "question_text", "doc_tokens", "orig_answer_text",
                     "start_position", "end_position", "is_impossible"])

InputFeatures = collections.namedtuple(
    "InputFeatures", ["unique_id", "example_index", "doc_span_index", "tokens",
                      "token_to_orig_map", "token_is_max_context", "input_ids", "input_mask",
                      "segment_ids", "start_position", "end_position", "is_impossible"])

DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def _is_whitespace(c):
  # U+202F (narrow no-break space) occurs in SQuAD contexts and the original splits on it.
  return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def split_context(paragraph_text):
  """Whitespace words of the context and, for every character, the index of its word."""
  doc_tokens = []
  char_to_word_offset = []
  prev_is_whitespace = True
  for c in paragraph_text:
    if _is_whitespace(c):
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def _require(container, key, where, input_file):
  if not isinstance(container, dict) or key not in container:
    raise BertTfError(f"{input_file}: not SQuAD JSON: {where} has no key {key!r}")
  return container[key]


def load_squad_json(input_file):
  """The parsed file, checked to have the official layout data -> paragraphs -> qas."""
  if not fileio.exists(input_file):
    raise BertTfError(f"{input_file}: no such file")
  try:  # UTF-8 (a byte order mark dropped), or gzip/bzip2/xz of it: fileio.read_text
    dataset = json.loads(fileio.read_text(input_file))
  except json.JSONDecodeError as e:
    raise BertTfError(f"{input_file}: not SQuAD JSON: {e}") from None
  data = _require(dataset, "data", "the top level", input_file)
  if not isinstance(data, list):
    raise BertTfError(f"{input_file}: not SQuAD JSON: 'data' should be a list of articles")
  for i, article in enumerate(data):
    for j, paragraph in enumerate(_require(article, "paragraphs", f"data[{i}]", input_file)):
      where = f"data[{i}].paragraphs[{j}]"
      _require(paragraph, "context", where, input_file)
      for k, qa in enumerate(_require(paragraph, "qas", where, input_file)):
        _require(qa, "id", f"{where}.qas[{k}]", input_file)
        _require(qa, "question", f"{where}.qas[{k}]", input_file)
  return dataset


def read_squad_examples(input_file, is_training, version_2_with_negative=False, dataset=None):
  """A SQuAD JSON file -> list of SquadExample (training: with word-level answer positions).

  `dataset`, when given, is the file already parsed by load_squad_json.

  As the original, training answers whose text is not found at answer_start are skipped with a
  warning; the count of skipped answers is logged.
  """
  dataset = dataset or load_squad_json(input_file)
  examples = []
  seen_ids = set()
  num_impossible_ignored = 0
  num_skipped = 0
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      doc_tokens, char_to_word_offset = split_context(paragraph["context"])
      for qa in paragraph["qas"]:
        if qa.get("is_impossible") and not version_2_with_negative:
          num_impossible_ignored += 1
        answer = (None, None, None, False)
        if is_training:
          answer = _training_answer(qa, doc_tokens, char_to_word_offset, input_file,
                                    version_2_with_negative)
          if answer is None:
            num_skipped += 1
            continue
        if not is_training and qa["id"] in seen_ids:
          raise BertTfError(f"{input_file}: question id {qa['id']!r} appears more than once: "
                            f"predictions are keyed by id, so each question needs its own")
        seen_ids.add(qa["id"])
        orig_answer_text, start_position, end_position, is_impossible = answer
        examples.append(SquadExample(
            qas_id=qa["id"], question_text=qa["question"], doc_tokens=doc_tokens,
            orig_answer_text=orig_answer_text, start_position=start_position,
            end_position=end_position, is_impossible=is_impossible))
  if num_impossible_ignored:
    logging.warning("%s: %d questions have is_impossible set but --version_2_with_negative is "
                    "off: this looks like a SQuAD 2.0 file", input_file, num_impossible_ignored)
  if num_skipped:
    logging.warning("%s: skipped %d answers whose text does not match the context",
                    input_file, num_skipped)
  return examples


def _training_answer(qa, doc_tokens, char_to_word_offset, input_file, version_2_with_negative):
  """(answer text, first word, last word, is_impossible) of a training question, or None when
  the answer text is not found at its answer_start."""
  is_impossible = version_2_with_negative and bool(qa.get("is_impossible", False))
  answers = _require(qa, "answers", f"question {qa['id']!r}", input_file)
  if len(answers) != 1 and not is_impossible:
    hint = (" (is_impossible is set: pass --version_2_with_negative)"
            if qa.get("is_impossible") else "")
    raise BertTfError(f"{input_file}: question {qa['id']!r} has {len(answers)} answers; "
                      f"for training each question needs exactly 1{hint}")
  if is_impossible:
    return "", -1, -1, True
  answer = answers[0]
  orig_answer_text = _require(answer, "text", f"question {qa['id']!r} answer", input_file)
  answer_offset = _require(answer, "answer_start", f"question {qa['id']!r} answer", input_file)
  if not isinstance(orig_answer_text, str):
    raise BertTfError(f"{input_file}: question {qa['id']!r}: answer text should be a string, is "
                      f"{type(orig_answer_text).__name__} {orig_answer_text!r}")
  # A character offset: 3.0 or "3" is a file another tool wrote wrongly (the original fails).
  if isinstance(answer_offset, bool) or not isinstance(answer_offset, int):
    raise BertTfError(f"{input_file}: question {qa['id']!r}: answer_start should be an integer "
                      f"(a character offset into the context), is "
                      f"{type(answer_offset).__name__} {answer_offset!r}")
  answer_end = answer_offset + len(orig_answer_text) - 1
  found = 0 <= answer_offset <= answer_end < len(char_to_word_offset)
  if found:
    start_position = char_to_word_offset[answer_offset]
    end_position = char_to_word_offset[answer_end]
    # Only answers whose text can be recovered from the words are kept (the original: a
    # mismatch is usually odd Unicode in the annotation).
    actual_text = " ".join(doc_tokens[start_position:end_position + 1])
    found = actual_text.find(" ".join(orig_answer_text.split())) != -1
  if not found:
    logging.warning("%s: question %r: could not find answer %r at answer_start %d; skipped",
                    input_file, qa["id"], orig_answer_text, answer_offset)
    return None
  return orig_answer_text, start_position, end_position, False


def improve_answer_span(doc_tokens, input_start, input_end, tokenizer, orig_answer_text):
  """The tightest word-piece span inside [input_start, input_end] that spells the answer.

  E.g. the answer "1895" annotated in the word "(1895-1943)." becomes the single piece "1895";
  when no sub-span matches (the answer is part of a word piece) the word span is kept.
  """
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


def check_is_max_context(doc_spans, cur_span_index, position):
  """Whether window `cur_span_index` gives token `position` its most context.

  The score is the smaller of the left and right context (plus a tie-break favouring longer
  windows), as in the original.
  """
  best_score = None
  best_span_index = None
  for span_index, doc_span in enumerate(doc_spans):
    end = doc_span.start + doc_span.length - 1
    if position < doc_span.start or position > end:
      continue
    score = min(position - doc_span.start, end - position) + 0.01 * doc_span.length
    if best_score is None or score > best_score:
      best_score = score
      best_span_index = span_index
  return cur_span_index == best_span_index


def doc_windows(num_tokens, max_tokens_for_doc, doc_stride):
  """The sliding windows (start, length) over a context of `num_tokens` word pieces."""
  doc_spans = []
  start_offset = 0
  while start_offset < num_tokens:
    length = min(num_tokens - start_offset, max_tokens_for_doc)
    doc_spans.append(DocSpan(start=start_offset, length=length))
    if start_offset + length == num_tokens:
      break
    start_offset += min(length, doc_stride)
  return doc_spans


def _wordpieces(doc_tokens, tokenizer):
  tok_to_orig_index = []
  orig_to_tok_index = []
  all_doc_tokens = []
  for i, token in enumerate(doc_tokens):
    orig_to_tok_index.append(len(all_doc_tokens))
    for sub_token in tokenizer.tokenize(token):
      tok_to_orig_index.append(i)
      all_doc_tokens.append(sub_token)
  return tok_to_orig_index, orig_to_tok_index, all_doc_tokens


def convert_examples_to_features(examples, tokenizer, max_seq_length, doc_stride,
                                 max_query_length, is_training, output_fn=None):
  """SquadExamples -> InputFeatures, one per window; returns them as a list if output_fn is None.

  Training windows that do not contain the answer, and impossible questions, point at [CLS] (0).
  """
  features = []
  output_fn = output_fn or features.append
  unique_id = FIRST_UNIQUE_ID
  cached_doc = (None, None)
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]
    # Questions of one paragraph share its word list: tokenize the context once for all of them.
    if cached_doc[0] is not example.doc_tokens:
      cached_doc = (example.doc_tokens, _wordpieces(example.doc_tokens, tokenizer))
    tok_to_orig_index, orig_to_tok_index, all_doc_tokens = cached_doc[1]
    answer_span = None
    if is_training:
      answer_span = _answer_pieces(example, tokenizer, orig_to_tok_index, all_doc_tokens)
    # [CLS] query [SEP] context [SEP]
    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    doc_spans = doc_windows(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
    for doc_span_index, doc_span in enumerate(doc_spans):
      feature = _window_feature(
          unique_id, example_index, example, query_tokens, doc_spans, doc_span_index,
          tok_to_orig_index, all_doc_tokens, tokenizer, max_seq_length, answer_span)
      if example_index < 3:  # the original's dumps, shown with --verbosity=1
        logging.vlog(1, "*** Example *** unique_id %d example_index %d doc_span_index %d",
                     unique_id, example_index, doc_span_index)
        logging.vlog(1, "tokens: %s", " ".join(tokenization.printable_text(t)
                                               for t in feature.tokens))
        if is_training:
          logging.vlog(1, "start_position %d end_position %d answer: %s", feature.start_position,
                       feature.end_position, " ".join(
                           feature.tokens[feature.start_position:feature.end_position + 1]))
      output_fn(feature)
      unique_id += 1
  return features


def _answer_pieces(example, tokenizer, orig_to_tok_index, all_doc_tokens):
  """The training answer's first and last word piece in the context ((-1, -1) if impossible)."""
  if example.is_impossible:
    return -1, -1
  tok_start_position = orig_to_tok_index[example.start_position]
  if example.end_position < len(example.doc_tokens) - 1:
    tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
  else:
    tok_end_position = len(all_doc_tokens) - 1
  return improve_answer_span(all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
                             example.orig_answer_text)


def _window_feature(unique_id, example_index, example, query_tokens, doc_spans, doc_span_index,
                    tok_to_orig_index, all_doc_tokens, tokenizer, max_seq_length, answer_span):
  """The InputFeatures of one window: [CLS] query [SEP] window [SEP], padded; answer_span (the
  answer's pieces, for training) becomes its positions in the window, or [CLS] when outside."""
  doc_span = doc_spans[doc_span_index]
  tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
  segment_ids = [0] * len(tokens)
  token_to_orig_map = {}
  token_is_max_context = {}
  for i in range(doc_span.length):
    split_token_index = doc_span.start + i
    token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
    token_is_max_context[len(tokens)] = check_is_max_context(doc_spans, doc_span_index,
                                                             split_token_index)
    tokens.append(all_doc_tokens[split_token_index])
    segment_ids.append(1)
  tokens.append("[SEP]")
  segment_ids.append(1)

  input_ids = tokenizer.convert_tokens_to_ids(tokens)
  input_mask = [1] * len(input_ids)
  padding = [0] * (max_seq_length - len(input_ids))
  input_ids = list(input_ids) + padding
  input_mask += padding
  segment_ids += padding

  start_position = end_position = None
  if answer_span is not None:
    start_position = end_position = 0
    tok_start, tok_end = answer_span
    doc_end = doc_span.start + doc_span.length - 1
    if not example.is_impossible and tok_start >= doc_span.start and tok_end <= doc_end:
      doc_offset = len(query_tokens) + 2
      start_position = tok_start - doc_span.start + doc_offset
      end_position = tok_end - doc_span.start + doc_offset
  return InputFeatures(
      unique_id=unique_id, example_index=example_index, doc_span_index=doc_span_index,
      tokens=tokens, token_to_orig_map=token_to_orig_map,
      token_is_max_context=token_is_max_context, input_ids=input_ids, input_mask=input_mask,
      segment_ids=segment_ids, start_position=start_position, end_position=end_position,
      is_impossible=example.is_impossible)


def squad_features(max_seq_length, is_training):
  """The records of run_squad.py (feature_to_record's): one window of a context per record
  (training adds the answer)."""
  name_to_features = {
      "unique_ids": tf.io.FixedLenFeature([], tf.int64),
      "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
      "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
  }
  if is_training:
    name_to_features["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
    name_to_features["end_positions"] = tf.io.FixedLenFeature([], tf.int64)
    name_to_features["is_impossible"] = tf.io.FixedLenFeature([], tf.int64)
  return name_to_features


def feature_to_record(feature, is_training):
  """The record of one feature, in the order of squad_features."""
  values = collections.OrderedDict()
  values["unique_ids"] = [feature.unique_id]
  values["input_ids"] = feature.input_ids
  values["input_mask"] = feature.input_mask
  values["segment_ids"] = feature.segment_ids
  if is_training:
    values["start_positions"] = [feature.start_position]
    values["end_positions"] = [feature.end_position]
    values["is_impossible"] = [int(bool(feature.is_impossible))]
  return values


def features_to_arrays(features):
  """Features -> dict of int32 numpy arrays, the model's inputs plus unique_ids."""
  return {
      "unique_ids": np.array([f.unique_id for f in features], np.int64),
      "input_ids": np.array([f.input_ids for f in features], np.int32),
      "input_mask": np.array([f.input_mask for f in features], np.int32),
      "segment_ids": np.array([f.segment_ids for f in features], np.int32),
  }




# ---------------------------------------------------------------------------------------------
# run_squad.py's task for bert_tf.drivers.finetuning.


@dataclasses.dataclass(frozen=True)
class SquadOptions:
  """run_squad.py's own flags (those of the server also export_savedmodel.py's, for
  --task=squad), and the rules on their values. The script evaluates its --predict_file, not a
  dev split, and distils nothing; its sequences are longer."""
  LACKS = ("do_eval", "eval_batch_size")
  DEFAULTS = {"max_seq_length": 384}

  train_file: Optional[str] = option(None, "SQuAD json for training. E.g., train-v1.1.json",
                                     export="--task=squad with --quantize=int8: the SQuAD json "
                                     "whose questions calibrate int8.")
  predict_file: Optional[str] = option(None, "SQuAD json for predictions. E.g., dev-v1.1.json or "
                                       "test-v1.1.json", export="--task=squad with --quantize or "
                                       "--dtype=bfloat16: the SQuAD json (with answers) that "
                                       "checks the reduced-precision model against float32.")
  doc_stride: int = option(128, "When splitting up a long document into chunks, how much stride "
                           "to take between chunks.", export=True, at_least=1)
  max_query_length: int = option(64, "The maximum number of tokens for the question. Questions "
                                 "longer than this will be truncated to this length.",
                                 export=True, at_least=1)
  n_best_size: int = option(20, "The total number of n-best predictions to generate in the "
                            "nbest_predictions.json output file.", export=True, at_least=0)
  max_answer_length: int = option(30, "The maximum length of an answer that can be generated. "
                                  "This is needed because the start and end predictions are not "
                                  "conditioned on one another.", export=True, at_least=1)
  version_2_with_negative: bool = option(False, "If true, the SQuAD examples contain some that do "
                                         "not have an answer.", export=True)
  null_score_diff_threshold: float = option(0.0, "If null_score - best_non_null is greater than "
                                            "the threshold predict null.", export=True)
  verbose_logging: bool = option(False, "If true, all of the warnings related to data processing "
                                 "will be printed. A number of warnings are expected for a "
                                 "normal SQuAD evaluation.", OUTPUT)
  tune_null_threshold: bool = option(False, "SQuAD 2.0 with a scored predict file: use the "
                                     "null_score_diff_threshold that maximizes F1 on it (reported "
                                     "in eval_results.json) instead of --null_score_diff_threshold.")

  def __post_init__(self):
    check_fields(self)
    if self.tune_null_threshold and not self.version_2_with_negative:
      raise BertTfError("--tune_null_threshold: needs --version_2_with_negative")


def _questions(path):
  """(dataset, [(id, question, context)]) of a SQuAD file."""
  dataset = load_squad_json(path)
  return dataset, [(qa["id"], qa["question"], paragraph["context"])
                   for article in dataset["data"] for paragraph in article["paragraphs"]
                   for qa in paragraph["qas"]]


def _question_inputs(questions):
  """The predictor's inputs of [(id, question, context)]."""
  return {"question": [q for _, q, _ in questions], "context": [c for _, _, c in questions]}


@base.register("squad")
class SquadTask(base.Task):
  """SQuAD 1.1 / 2.0: windowed features, BertSpanLabeler, the original's answer files and the
  official score (bert_tf.tasks.squad_answers); served by squad_server.SquadServer (question,
  context -> answer)."""

  script = "run_squad.py"
  options_class = SquadOptions
  server_class = squad_server.SquadServer
  record_files = {"train": "train.tf_record", "test": "eval.tf_record"}
  eval_split = "test"  # evaluation during training scores --predict_file
  primary_metric = "f1"

  @classmethod
  def check_options(cls, options):
    """--train_file and --predict_file must not be files the run writes into --output_dir."""
    fileio.check_dir_not_input(options.output_dir, squad_answers.OUTPUT_FILES + tuple(
        cls.record_files.values()), [("--train_file", options.task.train_file),
                                     ("--predict_file", options.task.predict_file)])

  def __init__(self, options, tokenizer):
    """The original's validate_flags_or_throw, as one-line errors naming the flag (the rules
    between run_squad's own flags and the shared ones; SquadOptions holds its own); a bad predict
    file fails here, before training."""
    own = options.task
    if options.pack_sequences:
      raise BertTfError("--pack_sequences: not supported by run_squad.py (a window's start and "
                        "end are a softmax over all its positions, so windows cannot share rows)")
    if options.do_train and not own.train_file:
      raise BertTfError("--train_file: required with --do_train")
    if options.do_predict and not own.predict_file:
      raise BertTfError("--predict_file: required with --do_predict")
    squad_server.check_lengths(options.max_seq_length, own.doc_stride, own.max_query_length)
    evaluates = options.eval_every_n_steps and options.do_train
    if evaluates and not own.predict_file:
      raise BertTfError("--predict_file: required with --eval_every_n_steps (the dev set, with "
                        "its answers, e.g. dev-v1.1.json)")
    super().__init__(options, tokenizer)
    self.dataset = (load_squad_json(own.predict_file) if options.do_predict or evaluates
                    else None)
    if evaluates and not squad_answers.has_answers(self.dataset, own.version_2_with_negative):
      raise BertTfError(f"--predict_file: {own.predict_file} has no answers to evaluate on "
                        f"(--eval_every_n_steps)")

  def schema(self, is_training):
    return squad_features(self.options.max_seq_length, is_training)

  @staticmethod
  def loss_fn(features, outputs):
    """Mean of the start and end position cross-entropies (the original's total_loss)."""
    start = heads.sparse_cross_entropy(features["start_positions"],
                                       tf.cast(outputs["start_logits"], tf.float32))
    end = heads.sparse_cross_entropy(features["end_positions"],
                                     tf.cast(outputs["end_logits"], tf.float32))
    return (start + end) / 2.0

  def _features(self, examples, is_training, path):
    """Writes the examples' windows to path; returns how many (training) or the windows."""
    v = self.options.task
    kept = []
    with records.RecordWriter(path) as writer:

      def output_fn(feature):
        writer.write(feature_to_record(feature, is_training))
        if not is_training:  # prediction needs them back; training windows are only written
          kept.append(feature)

      convert_examples_to_features(examples, self.tokenizer, self.options.max_seq_length,
                                   v.doc_stride,
                                   v.max_query_length, is_training, output_fn=output_fn)
    return writer.count if is_training else kept

  def write_train_records(self, path):
    v = self.options.task
    examples = read_squad_examples(v.train_file, is_training=True,
                                   version_2_with_negative=v.version_2_with_negative)
    if not examples:
      raise BertTfError(f"--train_file: {v.train_file} has no usable question")
    # Pre-shuffled (as the original) so that the shuffle buffer sees mixed articles.
    random.Random(self.options.runtime.seed).shuffle(examples)
    num_features = self._features(examples, True, path)
    logging.info("%s: %d questions in %d training windows", v.train_file, len(examples),
                 num_features)
    return len(examples), num_features, "training questions"

  def split_file(self, split):
    v = self.options.task
    return ("--train_file", v.train_file) if split == "train" else ("--predict_file", v.predict_file)

  def write_split_records(self, split, path):
    v = self.options.task
    examples = read_squad_examples(v.predict_file, is_training=False,
                                   version_2_with_negative=v.version_2_with_negative,
                                   dataset=self.dataset)
    if not examples:
      raise BertTfError(f"--predict_file: {v.predict_file} has no question")
    features = self._features(examples, False, path)
    logging.info("%s: %d questions in %d windows to predict", v.predict_file, len(examples),
                 len(features))
    return examples, features, path

  def eval_metric_names(self):
    """What the official script reports (squad_metrics), counts and thresholds aside."""
    if not self.options.task.version_2_with_negative:
      return list(squad_metrics.V1_METRICS)
    return list(squad_metrics.V2_METRICS)

  def finish_split(self, split, state, batches, global_step, output_dir=None):
    examples, features, path = state
    results = []
    for batch in batches:
      for unique_id, start, end in zip(batch["unique_ids"], batch["start_logits"],
                                       batch["end_logits"]):
        results.append(squad_answers.RawResult(int(unique_id), start, end))
    if len(results) != len(features):
      raise BertTfError(f"{path}: {len(results)} predictions for {len(features)} features")
    bad = sum(not (np.all(np.isfinite(r.start_logits)) and np.all(np.isfinite(r.end_logits)))
              for r in results)
    if bad:
      raise BertTfError(f"--init_checkpoint/--output_dir: the model gives non-finite logits "
                        f"({bad} of {len(results)} features)")
    return squad_answers.write_answers(self.options.task, self.options.do_lower_case, examples,
                                       features, results, self.dataset,
                                       output_dir or self.options.output_dir)

  def headline(self, split, results):
    """Exact match and F1; for SQuAD 2.0 the --null_score_diff_threshold they were scored at, and
    the best F1 over every threshold with that threshold."""
    names = ("exact_match", "exact", "f1", "null_score_diff_threshold", "best_f1",
             "best_f1_thresh")
    return {name: results[name] for name in names if name in results}

  # ------------------------------------------------------------------ serving
  # ------------------------------------------------------------------ reduced precision
  @classmethod
  def dev_file(cls, task_options):
    return "--predict_file", task_options.predict_file

  @classmethod
  def check_rows(cls, task_options, path):
    """Scored by the official script (v2 where the file has unanswerable questions); a question
    differs when its answer, or its no-answer decision, does."""
    dataset, questions = _questions(path)
    version_2 = task_options.version_2_with_negative or any(
        qa.get("is_impossible") for article in dataset["data"]
        for paragraph in article["paragraphs"] for qa in paragraph["qas"])

    def scores(results):
      predictions = {qid: r["answer"] if r["has_answer"] else ""
                     for (qid, _, _), r in zip(questions, results)}
      evaluate = squad_metrics.evaluate_v2 if version_2 else squad_metrics.evaluate_v1
      return dict(evaluate(dataset["data"], predictions))

    def same(a, b):
      return a["has_answer"] == b["has_answer"] and (not a["has_answer"] or
                                                    a["answer"] == b["answer"])

    return base.CheckSet(path, "questions", _question_inputs(questions), "f1", 1.0, scores,
                         same)

  @classmethod
  def calibration_rows(cls, task_options):
    if not task_options.train_file:
      raise BertTfError("--train_file: needed to calibrate int8 on the task's training examples")
    return task_options.train_file, _question_inputs(_questions(task_options.train_file)[1])

  @classmethod
  def serving_options(cls, task_options, init_checkpoint=None):
    own = task_options
    return dict(max_query_length=own.max_query_length, doc_stride=own.doc_stride,
                max_answer_length=own.max_answer_length, n_best_size=own.n_best_size,
                null_score_diff_threshold=(own.null_score_diff_threshold
                                           if own.version_2_with_negative else None))

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None,
                 causal=False):
    return heads.BertSpanLabeler(config, trim_padding=trim_padding, bilstm_units=bilstm_units,
                                 causal=causal)

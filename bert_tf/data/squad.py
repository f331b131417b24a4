"""SQuAD 1.1 / 2.0 data: read the official JSON, make windowed features, turn logits back into text.

The same data path as the original run_squad.py: the context is split on whitespace (keeping a
character -> word map so character-based answers become word spans), each word is WordPiece
tokenized, the answer span is tightened in word pieces, and long contexts are cut into windows of
`doc_stride`; each token is scored only in the window where it has the most context.
"""
import collections
import json
import math

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf import records
from bert_tf import tokenization
from bert_tf.errors import BertTfError

FIRST_UNIQUE_ID = 1000000000

SquadExample = collections.namedtuple(
    "SquadExample", ["qas_id", "question_text", "doc_tokens", "orig_answer_text",
                     "start_position", "end_position", "is_impossible"])

InputFeatures = collections.namedtuple(
    "InputFeatures", ["unique_id", "example_index", "doc_span_index", "tokens",
                      "token_to_orig_map", "token_is_max_context", "input_ids", "input_mask",
                      "segment_ids", "start_position", "end_position", "is_impossible"])

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

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
  try:
    with tf.io.gfile.GFile(input_file, "r") as reader:
      dataset = json.load(reader)
  except tf.errors.NotFoundError:
    raise BertTfError(f"{input_file}: no such file") from None
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


def has_answers(dataset, version_2_with_negative):
  """Whether the file can be scored: every question has answers (for 2.0, an 'answers' list)."""
  return all("answers" in qa and (version_2_with_negative or qa["answers"])
             for article in dataset["data"] for paragraph in article["paragraphs"]
             for qa in paragraph["qas"])


def read_squad_examples(input_file, is_training, version_2_with_negative=False, dataset=None):
  """A SQuAD JSON file -> list of SquadExample (training: with word-level answer positions).

  `dataset`, when given, is the file already parsed by load_squad_json.

  As the original, training answers whose text is not found at answer_start are skipped with a
  warning; the count of skipped answers is logged.
  """
  dataset = dataset or load_squad_json(input_file)
  examples = []
  num_impossible_ignored = 0
  num_skipped = 0
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      paragraph_text = paragraph["context"]
      doc_tokens, char_to_word_offset = split_context(paragraph_text)
      for qa in paragraph["qas"]:
        if qa.get("is_impossible") and not version_2_with_negative:
          num_impossible_ignored += 1
        start_position = None
        end_position = None
        orig_answer_text = None
        is_impossible = False
        if is_training:
          if version_2_with_negative:
            is_impossible = bool(qa.get("is_impossible", False))
          answers = _require(qa, "answers", f"question {qa['id']!r}", input_file)
          if len(answers) != 1 and not is_impossible:
            hint = (" (is_impossible is set: pass --version_2_with_negative)"
                    if qa.get("is_impossible") else "")
            raise BertTfError(f"{input_file}: question {qa['id']!r} has {len(answers)} answers; "
                              f"for training each question needs exactly 1{hint}")
          if is_impossible:
            start_position = -1
            end_position = -1
            orig_answer_text = ""
          else:
            answer = answers[0]
            orig_answer_text = _require(answer, "text", f"question {qa['id']!r} answer", input_file)
            answer_offset = _require(answer, "answer_start", f"question {qa['id']!r} answer",
                                     input_file)
            answer_end = answer_offset + len(orig_answer_text) - 1
            found = 0 <= answer_offset <= answer_end < len(char_to_word_offset)
            if found:
              start_position = char_to_word_offset[answer_offset]
              end_position = char_to_word_offset[answer_end]
              # Only answers whose text can be recovered from the words are kept (the original:
              # a mismatch is usually odd Unicode in the annotation).
              actual_text = " ".join(doc_tokens[start_position:end_position + 1])
              cleaned_answer_text = " ".join(orig_answer_text.split())
              found = actual_text.find(cleaned_answer_text) != -1
            if not found:
              num_skipped += 1
              logging.warning("%s: question %r: could not find answer %r at answer_start %d; "
                              "skipped", input_file, qa["id"], orig_answer_text, answer_offset)
              continue
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


def check_lengths(max_seq_length, doc_stride, max_query_length):
  """Raises BertTfError for flag values that cannot make features."""
  if max_seq_length <= max_query_length + 3:
    raise BertTfError(f"--max_seq_length ({max_seq_length}) must be greater than "
                      f"--max_query_length ({max_query_length}) + 3")
  max_tokens_for_doc = max_seq_length - max_query_length - 3
  if doc_stride <= 0 or doc_stride >= max_tokens_for_doc:
    raise BertTfError(f"--doc_stride ({doc_stride}) must be positive and less than "
                      f"max_seq_length - max_query_length - 3 = {max_tokens_for_doc}, the room "
                      "left for the context, so that windows overlap")


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

    tok_start_position = None
    tok_end_position = None
    if is_training and example.is_impossible:
      tok_start_position = -1
      tok_end_position = -1
    if is_training and not example.is_impossible:
      tok_start_position = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end_position = len(all_doc_tokens) - 1
      tok_start_position, tok_end_position = improve_answer_span(
          all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
          example.orig_answer_text)

    # [CLS] query [SEP] context [SEP]
    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    doc_spans = doc_windows(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
    for doc_span_index, doc_span in enumerate(doc_spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      segment_ids = [0] * len(tokens)
      token_to_orig_map = {}
      token_is_max_context = {}
      for i in range(doc_span.length):
        split_token_index = doc_span.start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
        token_is_max_context[len(tokens)] = check_is_max_context(
            doc_spans, doc_span_index, split_token_index)
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

      start_position = None
      end_position = None
      if is_training:
        start_position = 0
        end_position = 0
        doc_end = doc_span.start + doc_span.length - 1
        if (not example.is_impossible and tok_start_position >= doc_span.start and
            tok_end_position <= doc_end):
          doc_offset = len(query_tokens) + 2
          start_position = tok_start_position - doc_span.start + doc_offset
          end_position = tok_end_position - doc_span.start + doc_offset

      if example_index < 3:
        logging.info("*** Example *** unique_id %d example_index %d doc_span_index %d",
                     unique_id, example_index, doc_span_index)
        logging.info("tokens: %s", " ".join(tokenization.printable_text(t) for t in tokens))
        if is_training:
          logging.info("start_position %d end_position %d answer: %s", start_position,
                       end_position, " ".join(tokens[start_position:end_position + 1]))

      output_fn(InputFeatures(
          unique_id=unique_id, example_index=example_index, doc_span_index=doc_span_index,
          tokens=tokens, token_to_orig_map=token_to_orig_map,
          token_is_max_context=token_is_max_context, input_ids=input_ids, input_mask=input_mask,
          segment_ids=segment_ids, start_position=start_position, end_position=end_position,
          is_impossible=example.is_impossible))
      unique_id += 1
  return features


def feature_to_record(feature, is_training):
  """The record of one feature, in the order of records.squad_features."""
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


class FeatureWriter:
  """Writes features to a TFRecord file that appears only when close() succeeds."""

  def __init__(self, filename, is_training):
    self.filename = filename
    self.is_training = is_training
    self.num_features = 0
    self._tmp = fileio.temporary_name(filename)
    self._writer = tf.io.TFRecordWriter(self._tmp)

  def process_feature(self, feature):
    self.num_features += 1
    self._writer.write(records.serialize(feature_to_record(feature, self.is_training)))

  def close(self):
    self._writer.close()
    tf.io.gfile.rename(self._tmp, self.filename, overwrite=True)


def features_to_arrays(features):
  """Features -> dict of int32 numpy arrays, the model's inputs plus unique_ids."""
  return {
      "unique_ids": np.array([f.unique_id for f in features], np.int64),
      "input_ids": np.array([f.input_ids for f in features], np.int32),
      "input_mask": np.array([f.input_mask for f in features], np.int32),
      "segment_ids": np.array([f.segment_ids for f in features], np.int32),
  }


# ---------------------------------------------------------------------------------------------
# Post-processing: logits -> answer text.


def get_final_text(pred_text, orig_text, do_lower_case, verbose_logging=False):
  """Projects the de-tokenized prediction back onto the original words' characters.

  `orig_text` is the whitespace words the predicted pieces came from, e.g. "Steve Smith's" for
  the prediction "steve smith"; the answer should be "Steve Smith": neither the normalized pieces
  nor the whole words. Both are aligned character by character with spaces removed; when the
  alignment fails, the original words are returned (as the original).
  """

  def strip_spaces(text):
    ns_chars = []
    ns_to_s_map = {}
    for i, c in enumerate(text):
      if c == " ":
        continue
      ns_to_s_map[len(ns_chars)] = i
      ns_chars.append(c)
    return "".join(ns_chars), ns_to_s_map

  tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    if verbose_logging:
      logging.info("Unable to find text: %r in %r", pred_text, orig_text)
    return orig_text
  end_position = start_position + len(pred_text) - 1

  orig_ns_text, orig_ns_to_s_map = strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s_map = strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    if verbose_logging:
      logging.info("Length not equal after stripping spaces: %r vs %r", orig_ns_text, tok_ns_text)
    return orig_text

  tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}
  orig_start_position = orig_ns_to_s_map.get(tok_s_to_ns_map.get(start_position))
  if orig_start_position is None:
    if verbose_logging:
      logging.info("Couldn't map start position")
    return orig_text
  orig_end_position = orig_ns_to_s_map.get(tok_s_to_ns_map.get(end_position))
  if orig_end_position is None:
    if verbose_logging:
      logging.info("Couldn't map end position")
    return orig_text
  return orig_text[orig_start_position:orig_end_position + 1]


def best_indexes(logits, n_best_size):
  """Indexes of the n largest logits, largest first; ties keep the lower index first."""
  order = np.argsort(-np.asarray(logits, np.float64), kind="stable")
  return [int(i) for i in order[:n_best_size]]


def compute_softmax(scores):
  if not scores:
    return []
  max_score = max(scores)
  exp_scores = [math.exp(s - max_score) for s in scores]
  total = sum(exp_scores)
  return [s / total for s in exp_scores]


def _answer_text(example, feature, start_index, end_index, do_lower_case, verbose_logging):
  tok_text = " ".join(feature.tokens[start_index:end_index + 1])
  # De-tokenize word pieces, then normalize whitespace.
  tok_text = tok_text.replace(" ##", "").replace("##", "")
  tok_text = " ".join(tok_text.strip().split())
  orig_doc_start = feature.token_to_orig_map[start_index]
  orig_doc_end = feature.token_to_orig_map[end_index]
  orig_text = " ".join(example.doc_tokens[orig_doc_start:orig_doc_end + 1])
  return get_final_text(tok_text, orig_text, do_lower_case, verbose_logging)


def postprocess(examples, features, results, n_best_size, max_answer_length, do_lower_case,
                version_2_with_negative=False, null_score_diff_threshold=0.0,
                verbose_logging=False):
  """Logits -> (predictions, nbest, null_odds, best_non_null), OrderedDicts keyed by qas_id.

  As the original write_predictions: the n best start and end indexes of every window are paired
  (end not before start, at most max_answer_length pieces, start in a window where it has max
  context), ranked by start + end logit, and projected back to text. For v2.0 the null answer's
  score is the smallest [CLS] start + end logit over the windows; a question is answered "" when
  null score - best non-null score > null_score_diff_threshold. null_odds holds that difference
  and best_non_null the answer that would be given with no threshold, so the threshold can be
  tuned afterwards (see apply_null_threshold).
  """
  example_index_to_features = collections.defaultdict(list)
  for feature in features:
    example_index_to_features[feature.example_index].append(feature)
  unique_id_to_result = {result.unique_id: result for result in results}

  all_predictions = collections.OrderedDict()
  all_nbest = collections.OrderedDict()
  null_odds = collections.OrderedDict()
  best_non_null = collections.OrderedDict()
  for example_index, example in enumerate(examples):
    example_features = example_index_to_features[example_index]
    prelim = []  # (score, feature_index, start_index, end_index, start_logit, end_logit)
    score_null = 1000000.0  # the smallest null score over the windows
    null_feature_index = 0
    null_start_logit = 0.0
    null_end_logit = 0.0
    for feature_index, feature in enumerate(example_features):
      result = unique_id_to_result.get(feature.unique_id)
      if result is None:
        raise BertTfError(f"no prediction for feature {feature.unique_id} of question "
                          f"{example.qas_id!r}")
      start_logits = result.start_logits
      end_logits = result.end_logits
      if version_2_with_negative:
        feature_null_score = float(start_logits[0]) + float(end_logits[0])
        if feature_null_score < score_null:
          score_null = feature_null_score
          null_feature_index = feature_index
          null_start_logit = float(start_logits[0])
          null_end_logit = float(end_logits[0])
      num_tokens = len(feature.tokens)
      for start_index in best_indexes(start_logits, n_best_size):
        if (start_index >= num_tokens or start_index not in feature.token_to_orig_map or
            not feature.token_is_max_context.get(start_index, False)):
          continue
        for end_index in best_indexes(end_logits, n_best_size):
          if end_index >= num_tokens or end_index not in feature.token_to_orig_map:
            continue
          if end_index < start_index or end_index - start_index + 1 > max_answer_length:
            continue
          start_logit = float(start_logits[start_index])
          end_logit = float(end_logits[end_index])
          prelim.append((start_logit + end_logit, feature_index, start_index, end_index,
                         start_logit, end_logit))
    if version_2_with_negative:
      prelim.append((null_start_logit + null_end_logit, null_feature_index, 0, 0,
                     null_start_logit, null_end_logit))
    # A stable sort on the score only, so equal scores keep the original's order.
    prelim.sort(key=lambda p: p[0], reverse=True)

    seen = set()
    nbest = []  # (text, start_logit, end_logit)
    for _, feature_index, start_index, end_index, start_logit, end_logit in prelim:
      if len(nbest) >= n_best_size:
        break
      if start_index > 0:
        text = _answer_text(example, example_features[feature_index], start_index, end_index,
                            do_lower_case, verbose_logging)
        if text in seen:
          continue
      else:
        text = ""
      seen.add(text)
      nbest.append((text, start_logit, end_logit))
    if version_2_with_negative and "" not in seen:
      nbest.append(("", null_start_logit, null_end_logit))
    if not nbest:
      # As the original: a placeholder when no span was valid, so every question gets an answer.
      nbest.append(("empty", 0.0, 0.0))

    probs = compute_softmax([start + end for _, start, end in nbest])
    nbest_json = []
    for (text, start_logit, end_logit), prob in zip(nbest, probs):
      nbest_json.append(collections.OrderedDict(
          [("text", text), ("probability", prob), ("start_logit", start_logit),
           ("end_logit", end_logit)]))
    all_nbest[example.qas_id] = nbest_json

    if not version_2_with_negative:
      all_predictions[example.qas_id] = nbest[0][0]
      continue
    non_null = [entry for entry in nbest if entry[0]]
    if non_null:
      text, start_logit, end_logit = non_null[0]
      score_diff = score_null - start_logit - end_logit
    else:
      # Only the null answer is possible (the original would crash here): it wins at any threshold.
      text, score_diff = "", score_null
    null_odds[example.qas_id] = score_diff
    best_non_null[example.qas_id] = text
    all_predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold else text
  return all_predictions, all_nbest, null_odds, best_non_null


def apply_null_threshold(best_non_null, null_odds, threshold):
  """v2.0 predictions for another threshold: "" where null_odds > threshold."""
  return collections.OrderedDict(
      (qas_id, "" if null_odds[qas_id] > threshold else text)
      for qas_id, text in best_non_null.items())


def write_json(path, obj):
  fileio.write_text_atomically(path, json.dumps(obj, indent=4) + "\n")

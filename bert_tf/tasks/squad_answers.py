"""SQuAD answers: logits -> answer text, the answer files, and their official score.

As the original run_squad.py's write_predictions: the n best start and end indexes of every window
are paired (end not before start, at most max_answer_length pieces, start in a window where it has
max context), ranked by start + end logit, and projected back onto the context's words
(get_final_text). For SQuAD 2.0 the null answer's score is the smallest [CLS] start + end logit over
the windows, and a question is answered "" when null score - best non-null score >
null_score_diff_threshold.
"""
import collections
import json
import math
import os
import time

import numpy as np
from absl import logging

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.tasks import squad_metrics
from bert_tf.text import tokenization

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

# One candidate span: its score (start + end logit), where it is, and its two logits.
_Candidate = collections.namedtuple("_Candidate", ["score", "feature_index", "start_index",
                                                   "end_index", "start_logit", "end_logit"])

# What write_predictions writes into output_dir (run_squad.py checks no input file is one of them).
OUTPUT_FILES = ("predictions.json", "nbest_predictions.json", "null_odds.json", "eval_results.json")


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

  def fail(message):
    if verbose_logging:
      logging.info(message)
    return orig_text

  tok_text = " ".join(tokenization.BasicTokenizer(do_lower_case=do_lower_case).tokenize(orig_text))
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    return fail(f"Unable to find text: {pred_text!r} in {orig_text!r}")
  end_position = start_position + len(pred_text) - 1

  orig_ns_text, orig_ns_to_s_map = strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s_map = strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    return fail(f"Length not equal after stripping spaces: {orig_ns_text!r} vs {tok_ns_text!r}")

  tok_s_to_ns_map = {tok_index: i for i, tok_index in tok_ns_to_s_map.items()}
  orig_start_position = orig_ns_to_s_map.get(tok_s_to_ns_map.get(start_position))
  if orig_start_position is None:
    return fail("Couldn't map start position")
  orig_end_position = orig_ns_to_s_map.get(tok_s_to_ns_map.get(end_position))
  if orig_end_position is None:
    return fail("Couldn't map end position")
  return orig_text[orig_start_position:orig_end_position + 1]


def best_indexes(logits, n_best_size):
  """Indexes of the n largest logits, largest first; ties keep the lower index first."""
  order = np.argsort(-np.asarray(logits, np.float64), kind="stable")
  return [int(i) for i in order[:n_best_size]]


def compute_softmax(scores):
  """The original's _compute_softmax. Its sum is a plain loop, as the original's: Python 3.12's
  sum() of floats is compensated, which would change the probabilities' last digits."""
  if not scores:
    return []
  max_score = max(scores)
  exp_scores = [math.exp(s - max_score) for s in scores]
  total = 0.0
  for s in exp_scores:
    total += s
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


def _candidates(example, example_features, results_by_id, n_best_size, max_answer_length,
                version_2_with_negative):
  """The example's valid spans over its windows, best first, and its null candidate (the window
  with the smallest [CLS] start + end logit; None for SQuAD 1.1)."""
  candidates = []
  null = _Candidate(1000000.0, 0, 0, 0, 0.0, 0.0)
  for feature_index, feature in enumerate(example_features):
    result = results_by_id.get(feature.unique_id)
    if result is None:
      raise BertTfError(f"no prediction for feature {feature.unique_id} of question "
                        f"{example.qas_id!r}")
    start_logits, end_logits = result.start_logits, result.end_logits
    if version_2_with_negative:
      start, end = float(start_logits[0]), float(end_logits[0])
      if start + end < null.score:
        null = _Candidate(start + end, feature_index, 0, 0, start, end)
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
        start_logit, end_logit = float(start_logits[start_index]), float(end_logits[end_index])
        candidates.append(_Candidate(start_logit + end_logit, feature_index, start_index,
                                     end_index, start_logit, end_logit))
  if not version_2_with_negative:
    null = None
  else:
    candidates.append(_Candidate(null.start_logit + null.end_logit, *null[1:]))
  # A stable sort on the score only, so equal scores keep the original's order.
  candidates.sort(key=lambda c: c.score, reverse=True)
  return candidates, null


def _nbest(example, example_features, candidates, null, n_best_size, do_lower_case,
           verbose_logging):
  """The n best distinct answers (text, start_logit, end_logit), as the original's nbest."""
  seen = set()
  nbest = []
  for candidate in candidates:
    if len(nbest) >= n_best_size:
      break
    if candidate.start_index > 0:
      text = _answer_text(example, example_features[candidate.feature_index],
                          candidate.start_index, candidate.end_index, do_lower_case,
                          verbose_logging)
      if text in seen:
        continue
    else:
      text = ""
    seen.add(text)
    nbest.append((text, candidate.start_logit, candidate.end_logit))
  if null is not None and "" not in seen:
    nbest.append(("", null.start_logit, null.end_logit))
  if not nbest:
    # As the original: a placeholder when no span was valid, so every question gets an answer.
    nbest.append(("empty", 0.0, 0.0))
  return nbest


def postprocess(examples, features, results, n_best_size, max_answer_length, do_lower_case,
                version_2_with_negative=False, null_score_diff_threshold=0.0,
                verbose_logging=False):
  """Logits -> (predictions, nbest, null_odds, best_non_null), OrderedDicts keyed by qas_id.

  null_odds holds null score - best non-null score and best_non_null the answer that would be
  given with no threshold, so the threshold can be tuned afterwards (see apply_null_threshold).
  """
  features_by_example = collections.defaultdict(list)
  for feature in features:
    features_by_example[feature.example_index].append(feature)
  results_by_id = {result.unique_id: result for result in results}
  all_predictions, all_nbest = collections.OrderedDict(), collections.OrderedDict()
  null_odds, best_non_null = collections.OrderedDict(), collections.OrderedDict()
  for example_index, example in enumerate(examples):
    example_features = features_by_example[example_index]
    candidates, null = _candidates(example, example_features, results_by_id, n_best_size,
                                   max_answer_length, version_2_with_negative)
    nbest = _nbest(example, example_features, candidates, null, n_best_size, do_lower_case,
                   verbose_logging)
    probs = compute_softmax([start + end for _, start, end in nbest])
    all_nbest[example.qas_id] = [
        collections.OrderedDict([("text", text), ("probability", prob),
                                 ("start_logit", start_logit), ("end_logit", end_logit)])
        for (text, start_logit, end_logit), prob in zip(nbest, probs)]
    if not version_2_with_negative:
      all_predictions[example.qas_id] = nbest[0][0]
      continue
    non_null = [entry for entry in nbest if entry[0]]
    if non_null:
      text, start_logit, end_logit = non_null[0]
      score_diff = null.score - start_logit - end_logit
    else:
      # Only the null answer is possible (the original would crash here): it wins at any threshold.
      text, score_diff = "", null.score
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


def has_answers(dataset, version_2_with_negative):
  """Whether the file can be scored: every question has answers (for 2.0, an 'answers' list)."""
  return all("answers" in qa and (version_2_with_negative or qa["answers"])
             for article in dataset["data"] for paragraph in article["paragraphs"]
             for qa in paragraph["qas"])


def score(squad, dataset, predictions, null_odds, best_non_null):
  """(predictions, evaluation): the official score of the predictions when the predict file has
  answers ({} when it has none); with --tune_null_threshold, the predictions and the score at the
  threshold that maximizes F1.

  For SQuAD 2.0, scoring the best non-null answers with na_probs = null odds and na_prob_thresh =
  the threshold scores exactly predictions.json, and searches the threshold over every answer
  (exact, where scoring predictions.json would give a lower bound). squad: the run's
  squad.SquadOptions.
  """
  v2 = squad.version_2_with_negative
  scorable = has_answers(dataset, v2)
  if squad.tune_null_threshold and not scorable:
    raise BertTfError(f"--tune_null_threshold: {squad.predict_file} has no answers to tune on")
  if not scorable:
    return predictions, {}
  if not v2:
    return predictions, squad_metrics.evaluate_v1(dataset["data"], predictions)
  threshold = squad.null_score_diff_threshold
  evaluation = squad_metrics.evaluate_v2(dataset["data"], best_non_null, null_odds, threshold)
  if squad.tune_null_threshold:
    threshold = evaluation["best_f1_thresh"]
    logging.info("Best --null_score_diff_threshold on %s: %.4f", squad.predict_file, threshold)
    predictions = apply_null_threshold(best_non_null, null_odds, threshold)
    evaluation = squad_metrics.evaluate_v2(dataset["data"], best_non_null, null_odds, threshold)
  evaluation["null_score_diff_threshold"] = threshold
  return predictions, evaluation


def write_answers(squad, do_lower_case, examples, features, results, dataset, output_dir):
  """predictions.json, nbest_predictions.json, null_odds.json and, when scorable, eval_results.json
  in output_dir, as the run's squad.SquadOptions say.

  Returns the evaluation (empty when the predict file has no answers).
  """
  v2 = squad.version_2_with_negative
  start = time.time()
  predictions, nbest, null_odds, best_non_null = postprocess(
      examples, features, results, squad.n_best_size, squad.max_answer_length,
      do_lower_case, version_2_with_negative=v2,
      null_score_diff_threshold=squad.null_score_diff_threshold,
      verbose_logging=squad.verbose_logging)
  logging.info("Post-processed %d questions in %.2f s", len(examples), time.time() - start)
  predictions, evaluation = score(squad, dataset, predictions, null_odds, best_non_null)
  predictions_file, nbest_file, null_odds_file, results_file = OUTPUT_FILES
  write_json(os.path.join(output_dir, predictions_file), predictions)
  write_json(os.path.join(output_dir, nbest_file), nbest)
  if v2:
    write_json(os.path.join(output_dir, null_odds_file), null_odds)
  if evaluation:
    write_json(os.path.join(output_dir, results_file), evaluation)
    logging.info("%s: %s", results_file, ", ".join(
        f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
        for key, value in evaluation.items()))
  return evaluation

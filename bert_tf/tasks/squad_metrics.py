"""The official SQuAD v1.1 and v2.0 evaluation: the numbers evaluate-v1.1.py / -v2.0.py print.

Both take the parsed dataset's "data" list and a dict qas_id -> predicted text, and score on the
official 0-100 scale with the official key names. The answer normalization (lower case, no
punctuation, no articles, single spaces) and token F1 are the scripts'; the two versions differ in
small ways kept here: v1.1 gives F1 0 to an empty prediction, v2.0 gives 1 when the gold answer is
empty too.
"""
import collections
import math
import re
import string

from absl import logging

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s):
  """Lower text and remove punctuation, articles and extra whitespace."""
  s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", s).split())


def _get_tokens(s):
  return normalize_answer(s).split() if s else []


def exact_match(prediction, ground_truth):
  return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_v1(prediction, ground_truth):
  """Token F1 as evaluate-v1.1.py: 0 whenever no token is shared (also when both are empty)."""
  prediction_tokens = normalize_answer(prediction).split()
  ground_truth_tokens = normalize_answer(ground_truth).split()
  num_same = sum((collections.Counter(prediction_tokens) &
                  collections.Counter(ground_truth_tokens)).values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(prediction_tokens)
  recall = num_same / len(ground_truth_tokens)
  return 2 * precision * recall / (precision + recall)


def f1_v2(prediction, ground_truth):
  """Token F1 as evaluate-v2.0.py: if either side is empty, 1 when both are, else 0."""
  gold_toks = _get_tokens(ground_truth)
  pred_toks = _get_tokens(prediction)
  if not gold_toks or not pred_toks:
    return float(gold_toks == pred_toks)
  num_same = sum((collections.Counter(gold_toks) & collections.Counter(pred_toks)).values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_toks)
  recall = num_same / len(gold_toks)
  return 2 * precision * recall / (precision + recall)


def _questions(dataset):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield qa


# The scores evaluate_v1 and evaluate_v2 (with na_probs) report, counts and thresholds aside.
V1_METRICS = ("exact_match", "f1")
V2_METRICS = ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact",
              "best_f1")


def evaluate_v1(dataset, predictions):
  """{"exact_match", "f1"}: the mean over questions of the best score against any gold answer.

  A question without a prediction scores 0, as in the official script.
  """
  exact = f1 = total = 0.0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      logging.error("Unanswered question %s will receive score 0.", qa["id"])
      continue
    ground_truths = [answer["text"] for answer in qa["answers"]]
    prediction = predictions[qa["id"]]
    exact += max(exact_match(prediction, gt) for gt in ground_truths)
    f1 += max(f1_v1(prediction, gt) for gt in ground_truths)
  return collections.OrderedDict(
      [("exact_match", 100.0 * exact / total), ("f1", 100.0 * f1 / total)])


def raw_scores_v2(dataset, predictions):
  """qas_id -> (exact, f1) of the prediction, and qas_id -> whether the question has an answer."""
  exact_scores = {}
  f1_scores = {}
  has_answer = {}
  for qa in _questions(dataset):
    qid = qa["id"]
    has_answer[qid] = bool(qa["answers"])
    gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
    if not gold_answers:
      # For unanswerable questions the only correct answer is the empty string.
      gold_answers = [""]
    if qid not in predictions:
      logging.error("Missing prediction for %s", qid)
      continue
    prediction = predictions[qid]
    exact_scores[qid] = max(exact_match(a, prediction) for a in gold_answers)
    f1_scores[qid] = max(f1_v2(prediction, a) for a in gold_answers)
  return exact_scores, f1_scores, has_answer


def _apply_no_answer_threshold(scores, na_probs, has_answer, na_prob_thresh):
  return {qid: (float(not has_answer[qid]) if na_probs[qid] > na_prob_thresh else s)
          for qid, s in scores.items()}


def _mean_scores(exact_scores, f1_scores, qid_list):
  total = len(qid_list)
  return collections.OrderedDict([
      ("exact", 100.0 * sum(exact_scores[k] for k in qid_list) / total),
      ("f1", 100.0 * sum(f1_scores[k] for k in qid_list) / total),
      ("total", total),
  ])


def find_best_threshold(scores, null_scores, na_probs):
  """(best score in %, threshold): the best of answering "" where na_prob > threshold.

  scores[qid]: the question's score with its prediction; null_scores[qid]: with "" instead.
  evaluate-v2.0.py's search (start from every question answered "", answer them in increasing
  na_prob order, keep the best running score), made exact, so that the threshold applied as
  --null_score_diff_threshold gives the score: questions with equal na_prob are answered together
  (a threshold cannot split them); answering "" scores what "" scores (the script counts 1 for a
  question without answers and 0 for one with answers, though a gold answer such as "the"
  normalizes to "", and it scores a prediction that normalizes to "" as wrong); and when answering
  nothing is best, the threshold lies below every na_prob (the script reports 0.0, which answers
  every question whose na_prob is negative). Elsewhere the figures are the script's.
  """
  ordered = sorted((qid for qid in na_probs if qid in scores), key=lambda k: na_probs[k])
  cur_score = best_score = sum(null_scores[qid] for qid in scores)
  best_thresh = math.floor(na_probs[ordered[0]]) - 1.0 if ordered else 0.0
  for i, qid in enumerate(ordered):
    cur_score += scores[qid] - null_scores[qid]
    last_of_tie = i + 1 == len(ordered) or na_probs[ordered[i + 1]] != na_probs[qid]
    if last_of_tie and cur_score > best_score:
      best_score = cur_score
      best_thresh = na_probs[qid]
  return 100.0 * best_score / len(scores), best_thresh


def evaluate_v2(dataset, predictions, na_probs=None, na_prob_thresh=1.0):
  """evaluate-v2.0.py's output: exact, f1, total, HasAns_*, NoAns_*, and with na_probs best_*.

  na_probs (qas_id -> no-answer score, e.g. our null_odds.json) and na_prob_thresh behave as the
  script's --na-prob-file and --na-prob-thresh: questions with na_prob > na_prob_thresh count as
  answered "" in exact/f1, and best_exact/best_f1 with their thresholds come from the threshold
  search over na_probs. Questions without a prediction are left out (the script's behaviour).
  """
  has_na_probs = na_probs is not None
  if not has_na_probs:
    na_probs = {k: 0.0 for k in predictions}
  exact_raw, f1_raw, has_answer = raw_scores_v2(dataset, predictions)
  exact_thresh = _apply_no_answer_threshold(exact_raw, na_probs, has_answer, na_prob_thresh)
  f1_thresh = _apply_no_answer_threshold(f1_raw, na_probs, has_answer, na_prob_thresh)
  out = _mean_scores(exact_thresh, f1_thresh, list(exact_thresh))
  has_answer_qids = [k for k in exact_thresh if has_answer[k]]
  no_answer_qids = [k for k in exact_thresh if not has_answer[k]]
  for prefix, qids in (("HasAns", has_answer_qids), ("NoAns", no_answer_qids)):
    if qids:
      for key, value in _mean_scores(exact_thresh, f1_thresh, qids).items():
        out[f"{prefix}_{key}"] = value
  if has_na_probs:
    exact_null, f1_null, _ = raw_scores_v2(dataset, {k: "" for k in predictions})
    out["best_exact"], out["best_exact_thresh"] = find_best_threshold(exact_raw, exact_null,
                                                                      na_probs)
    out["best_f1"], out["best_f1_thresh"] = find_best_threshold(f1_raw, f1_null, na_probs)
  return out

"""The official SQuAD metrics: hand-computed cases, and Model Garden's copies of the scripts."""
import random

import pytest

from bert_tf import squad_metrics


def _dataset(questions):
  """questions: list of (qas_id, [gold texts])."""
  qas = [{"id": qid, "question": "q?",
          "answers": [{"text": t, "answer_start": 0} for t in golds]}
         for qid, golds in questions]
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]


def test_normalize_answer():
  assert squad_metrics.normalize_answer("  The  Cat's, a HAT!") == "cats hat"
  assert squad_metrics.normalize_answer("Theater an-d") == "theater and"
  assert squad_metrics.normalize_answer("") == ""


def test_hand_computed_scores():
  # "red dog" vs "the big red dog" (-> "big red dog"): shared 2: P = 1, R = 2/3 -> F1 = 0.8
  assert squad_metrics.f1_v1("red dog", "the big red dog") == pytest.approx(0.8)
  assert squad_metrics.f1_v2("red dog", "the big red dog") == pytest.approx(0.8)
  # "red dog barks": P = R = 2/3 -> F1 = 2/3
  assert squad_metrics.f1_v2("red dog barks", "the big red dog") == pytest.approx(2 / 3)
  assert squad_metrics.exact_match("The Dog.", "dog") == 1.0
  # The two scripts differ on empty answers.
  assert squad_metrics.f1_v1("", "") == 0.0
  assert squad_metrics.f1_v2("", "") == 1.0
  assert squad_metrics.f1_v2("the", "") == 1.0  # normalizes to empty
  dataset = _dataset([("a", ["Denver Broncos", "Broncos"]), ("b", ["1858"]), ("c", ["x y"])])
  result = squad_metrics.evaluate_v1(dataset, {"a": "the Broncos", "b": "in 1858", "c": "z"})
  # a: exact 1 (against "Broncos"); b: F1 2*(1/2*1)/(1.5) = 2/3; c: 0.
  assert result["exact_match"] == pytest.approx(100 / 3)
  assert result["f1"] == pytest.approx(100 * (1 + 2 / 3) / 3)


def test_v2_breakdown_and_threshold_search_by_hand():
  dataset = _dataset([("a", ["Paris"]), ("b", []), ("c", ["blue sky"]), ("d", [])])
  predictions = {"a": "Paris", "b": "London", "c": "sky", "d": ""}
  na_probs = {"a": -3.0, "b": 2.0, "c": 0.5, "d": 5.0}
  result = squad_metrics.evaluate_v2(dataset, predictions, na_probs, na_prob_thresh=1.0)
  # With threshold 1.0: b and d count as "", so b and d are right; a right; c F1 2/3.
  assert result["exact"] == pytest.approx(75.0)
  assert result["f1"] == pytest.approx(100 * (1 + 1 + 2 / 3 + 1) / 4)
  assert result["HasAns_total"] == 2 and result["NoAns_total"] == 2
  assert result["NoAns_exact"] == 100.0
  # Search: start 2 (all ""), +a (1) = 3 at -3.0, +c (1/2 exact 0, f1 2/3) at 0.5, b -1, d 0.
  assert result["best_exact"] == pytest.approx(75.0)
  assert result["best_exact_thresh"] == -3.0
  assert result["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
  assert result["best_f1_thresh"] == 0.5
  plain = squad_metrics.evaluate_v2(dataset, predictions)
  assert plain["exact"] == 50.0 and "best_f1" not in plain


def _random_case(rng):
  words = ["the", "a", "Paris", "France", "river", "Seine,", "1858", "blue", "sky", "of", "an",
           "Saint", "Bernadette", "(1895-1943).", "Él", "café"]

  def phrase(n):
    return " ".join(rng.choice(words) for _ in range(n))

  questions, predictions, na_probs = [], {}, {}
  for i in range(300):
    qid = f"q{i}"
    golds = [] if rng.random() < 0.3 else [phrase(rng.randint(1, 4))
                                           for _ in range(rng.randint(1, 3))]
    questions.append((qid, golds))
    roll = rng.random()
    if roll < 0.2:
      predictions[qid] = ""
    elif roll < 0.4 and golds:
      predictions[qid] = rng.choice(golds).upper() + rng.choice(["", ".", " the"])
    else:
      predictions[qid] = phrase(rng.randint(1, 5))
    na_probs[qid] = round(rng.uniform(-5, 5), 1)  # rounded so that ties occur
  return _dataset(questions), predictions, na_probs


def test_matches_model_garden_official_copies():
  v1 = pytest.importorskip("official.nlp.tools.squad_evaluate_v1_1")
  v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
  rng = random.Random(7)
  for _ in range(3):
    dataset, predictions, na_probs = _random_case(rng)
    answered = _dataset([(qa["id"], [a["text"] for a in qa["answers"]])
                         for qa in dataset[0]["paragraphs"][0]["qas"] if qa["answers"]])
    ours = squad_metrics.evaluate_v1(answered, predictions)
    theirs = v1.evaluate(answered, predictions)  # 0-1 scale, final_f1
    assert ours["exact_match"] == pytest.approx(100 * theirs["exact_match"])
    assert ours["f1"] == pytest.approx(100 * theirs["final_f1"])

    ours = squad_metrics.evaluate_v2(dataset, predictions, na_probs)
    theirs = v2.evaluate(dataset, predictions, na_probs)  # final_* instead of best_*
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                "NoAns_exact", "NoAns_f1", "NoAns_total"):
      assert ours[key] == pytest.approx(theirs[key]), key
    for key in ("exact", "exact_thresh", "f1", "f1_thresh"):
      assert ours["best_" + key] == pytest.approx(theirs["final_" + key]), key

"""The official SQuAD metrics: hand-computed cases, and Model Garden's copies of the scripts."""
import random

import pytest

from bert_tf.tasks import squad_metrics


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


def _random_case(rng, ties=True, quirks=True):
  """300 random questions. ties: null odds rounded so that equal values occur; quirks: gold
  answers and predictions that normalize to "" (e.g. "the"), where the official search miscounts."""
  words = ["the", "a", "Paris", "France", "river", "Seine,", "1858", "blue", "sky", "of", "an",
           "Saint", "Bernadette", "(1895-1943).", "Él", "café"]
  content = [w for w in words if squad_metrics.normalize_answer(w)]

  def phrase(n):
    text = " ".join(rng.choice(words) for _ in range(n))
    return text if quirks or squad_metrics.normalize_answer(text) else rng.choice(content)

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
    na_probs[qid] = round(rng.uniform(-5, 5), 1) if ties else rng.uniform(-5, 5)
  return _dataset(questions), predictions, na_probs


def _applied(dataset, predictions, na_probs, threshold):
  """evaluate_v2's exact and f1 with the threshold applied as run_squad applies it."""
  thresholded = {q: "" if na_probs[q] > threshold else p for q, p in predictions.items()}
  result = squad_metrics.evaluate_v2(dataset, thresholded)
  return result["exact"], result["f1"]


def test_matches_model_garden_official_copies():
  """Where the official search counts right (no ties, nothing that normalizes to ""), every figure
  is the official script's, the best thresholds included."""
  v1 = pytest.importorskip("official.nlp.tools.squad_evaluate_v1_1")
  v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
  rng = random.Random(7)
  for _ in range(3):
    dataset, predictions, na_probs = _random_case(rng, ties=False, quirks=False)
    answered = _dataset([(qa["id"], [a["text"] for a in qa["answers"]])
                         for qa in dataset[0]["paragraphs"][0]["qas"] if qa["answers"]])
    ours = squad_metrics.evaluate_v1(answered, predictions)
    theirs = v1.evaluate(answered, predictions)  # 0-1 scale, final_f1
    assert ours["exact_match"] == pytest.approx(100 * theirs["exact_match"])
    assert ours["f1"] == pytest.approx(100 * theirs["final_f1"])

    ours = squad_metrics.evaluate_v2(dataset, predictions, na_probs)
    theirs = v2.evaluate(dataset, predictions, na_probs)  # final_* instead of best_*
    for key in ("exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                "NoAns_exact", "NoAns_f1", "NoAns_total", "best_exact", "best_f1"):
      assert ours[key] == pytest.approx(theirs[key.replace("best_", "final_")]), key
    for key in ("exact_thresh", "f1_thresh"):
      if ours["best_" + key] < min(na_probs.values()):  # answering nothing is best: see below
        assert theirs["final_" + key] == 0.0
      else:
        assert ours["best_" + key] == theirs["final_" + key], key


@pytest.mark.parametrize("ties,quirks", [(False, True), (True, False), (True, True)])
def test_best_threshold_gives_the_best_score_when_applied(ties, quirks):
  """best_* is the best score over every threshold, and applying best_*_thresh gives it."""
  rng = random.Random(11)
  for _ in range(2):
    dataset, predictions, na_probs = _random_case(rng, ties=ties, quirks=quirks)
    ours = squad_metrics.evaluate_v2(dataset, predictions, na_probs)
    candidates = [min(na_probs.values()) - 1.0] + sorted(set(na_probs.values()))
    applied = [_applied(dataset, predictions, na_probs, t) for t in candidates]
    assert ours["best_exact"] == pytest.approx(max(e for e, _ in applied))
    assert ours["best_f1"] == pytest.approx(max(f for _, f in applied))
    exact, _ = _applied(dataset, predictions, na_probs, ours["best_exact_thresh"])
    _, f1 = _applied(dataset, predictions, na_probs, ours["best_f1_thresh"])
    assert exact == pytest.approx(ours["best_exact"]) and f1 == pytest.approx(ours["best_f1"])


def test_best_threshold_when_answering_nothing_is_best():
  """Every null odds negative and every answer wrong: the official script reports threshold 0.0,
  which answers every question (EM 0 here); ours lies below the null odds and gives best_exact."""
  v2 = pytest.importorskip("official.nlp.tools.squad_evaluate_v2_0")
  dataset = _dataset([("a", []), ("b", []), ("c", ["Paris"])])
  predictions = {"a": "London", "b": "Rome", "c": "Berlin"}
  na_probs = {"a": -2.5, "b": -1.0, "c": -0.25}
  ours = squad_metrics.evaluate_v2(dataset, predictions, na_probs)
  theirs = v2.evaluate(dataset, predictions, na_probs)
  assert ours["best_exact"] == pytest.approx(theirs["final_exact"]) == pytest.approx(200 / 3)
  assert theirs["final_exact_thresh"] == 0.0
  assert _applied(dataset, predictions, na_probs, 0.0)[0] == 0.0
  assert ours["best_exact_thresh"] < -2.5
  assert _applied(dataset, predictions, na_probs, ours["best_exact_thresh"])[0] == pytest.approx(
      200 / 3)

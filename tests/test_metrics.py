"""bert_tf.tasks.metrics against scipy / scikit-learn (skipped when absent) and hand-computed values."""
import numpy as np
import pytest

from bert_tf.tasks import metrics


def test_hand_computed_values():
  labels = [1, 0, 1, 1, 0, 0]
  predictions = [1, 0, 0, 1, 1, 0]
  assert metrics.accuracy(labels, predictions) == pytest.approx(4 / 6)
  # tp=2, fp=1, fn=1: F1 = 2*2 / (3 + 3).
  assert metrics.f1(labels, predictions) == pytest.approx(4 / 6)
  # tp=2 tn=2 fp=1 fn=1: (4 - 1) / sqrt(3*3*3*3).
  assert metrics.matthews_corrcoef(labels, predictions) == pytest.approx(3 / 9)
  assert metrics.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
  assert metrics.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
  assert metrics.spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_degenerate_inputs_give_zero():
  assert metrics.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0
  assert metrics.f1([0, 0], [0, 0]) == 0.0
  assert metrics.pearson([1, 2, 3], [5, 5, 5]) == 0.0
  with pytest.raises(ValueError):
    metrics.accuracy([1, 2], [1])


def test_against_sklearn_and_scipy():
  sklearn_metrics = pytest.importorskip("sklearn.metrics")
  stats = pytest.importorskip("scipy.stats")
  rng = np.random.RandomState(0)
  for _ in range(5):
    labels = rng.randint(0, 2, size=200)
    predictions = rng.randint(0, 2, size=200)
    assert metrics.f1(labels, predictions) == pytest.approx(
        sklearn_metrics.f1_score(labels, predictions))
    assert metrics.matthews_corrcoef(labels, predictions) == pytest.approx(
        sklearn_metrics.matthews_corrcoef(labels, predictions))
    assert metrics.accuracy(labels, predictions) == pytest.approx(
        sklearn_metrics.accuracy_score(labels, predictions))
    # STS-B-like scores with many ties.
    scores = rng.randint(0, 11, size=200) / 2.0
    guesses = scores + rng.normal(scale=1.5, size=200).round(1)
    assert metrics.pearson(scores, guesses) == pytest.approx(stats.pearsonr(scores, guesses)[0])
    assert metrics.spearman(scores, guesses) == pytest.approx(stats.spearmanr(scores, guesses)[0])

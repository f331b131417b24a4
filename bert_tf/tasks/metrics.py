"""Metrics in plain numpy: accuracy, binary F1, Matthews correlation, Pearson, Spearman, and the
softmax and cross-entropy of predicted logits.

Each takes labels then predictions (array-likes of equal length) and returns a Python float.
Degenerate inputs (one class only, constant predictions) give 0.0 where the ratio is undefined,
as scikit-learn does for Matthews and F1.
"""
import numpy as np


def _pair(labels, predictions):
  labels = np.asarray(labels)
  predictions = np.asarray(predictions)
  if labels.shape != predictions.shape:
    raise ValueError(f"labels {labels.shape} and predictions {predictions.shape} differ in shape")
  return labels, predictions


def accuracy(labels, predictions):
  labels, predictions = _pair(labels, predictions)
  return float(np.mean(labels == predictions)) if labels.size else 0.0


def f1(labels, predictions, positive=1):
  """F1 of the positive class (MRPC, QQP)."""
  labels, predictions = _pair(labels, predictions)
  true_positives = np.sum((predictions == positive) & (labels == positive))
  predicted = np.sum(predictions == positive)
  actual = np.sum(labels == positive)
  if predicted + actual == 0:
    return 0.0
  return float(2.0 * true_positives / (predicted + actual))


def matthews_corrcoef(labels, predictions):
  """Matthews correlation of binary labels (CoLA)."""
  labels, predictions = _pair(labels, predictions)
  labels = labels.astype(bool)
  predictions = predictions.astype(bool)
  tp = float(np.sum(labels & predictions))
  tn = float(np.sum(~labels & ~predictions))
  fp = float(np.sum(~labels & predictions))
  fn = float(np.sum(labels & ~predictions))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(labels, predictions):
  labels, predictions = _pair(labels, predictions)
  x = labels.astype(np.float64) - np.mean(labels)
  y = predictions.astype(np.float64) - np.mean(predictions)
  denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator else 0.0


def _ranks(values):
  """Ranks from 1, ties sharing their average rank (as scipy.stats.rankdata)."""
  values = np.asarray(values, dtype=np.float64)
  order = np.argsort(values, kind="mergesort")
  sorted_values = values[order]
  # Start index of each run of equal values, and the run each sorted position belongs to.
  starts = np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]])
  run = np.cumsum(starts) - 1
  first = np.flatnonzero(starts)
  last = np.concatenate([first[1:], [len(values)]]) - 1
  average = (first + last) / 2.0 + 1.0
  ranks = np.empty(len(values))
  ranks[order] = average[run]
  return ranks


def spearman(labels, predictions):
  labels, predictions = _pair(labels, predictions)
  return pearson(_ranks(labels), _ranks(predictions))


def softmax(logits):
  """Softmax over the last axis, in the logits' float type."""
  z = logits - logits.max(axis=-1, keepdims=True)
  e = np.exp(z)
  return e / e.sum(axis=-1, keepdims=True)


def cross_entropy(logits, labels, weights=None):
  """Mean softmax cross-entropy of integer labels (weighted over the labelled positions when
  weights are given), computed in the logits' float type (float64 from the fine-tuning scripts)."""
  shifted = logits - logits.max(axis=-1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
  picked = np.take_along_axis(log_probs, np.asarray(labels)[..., None], axis=-1)[..., 0]
  if weights is None:
    return float(-np.mean(picked))
  return float(-(picked * weights).sum() / max(weights.sum(), 1.0))

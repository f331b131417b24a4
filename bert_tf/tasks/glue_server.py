"""The server of run_classifier.py's models (glue.GlueTask.server_class; any sentence or
sentence-pair classifier's): raw text(s) -> class probabilities and label names, or scores.

  serving_default(text_a[, text_b]) -> probabilities [B, N] float32, label_ids [B], labels [B]
  string (a regression task, STS-B: scores [B]). text_b is an input only for the tasks whose data
  are pairs; an empty text_b is packed as a single text, as run_classifier does (`if tokens_b`).
  tokenize(same inputs) -> the model's inputs, one row per input.

Inputs are truncated as run_classifier truncates them (one text to max_seq_length - 2 pieces; a
pair longest-first), never an error; an empty string is a valid input ([CLS] [SEP]). The model
runs on the batch's longest sequence only (padding changes no result).
"""
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import heads
from bert_tf.tasks import text_server
from bert_tf.text import fast_tokenization


class ClassifierServer(text_server.TextServer):
  """Raw text(s) -> class probabilities and label names (or regression scores)."""

  INPUTS = ("text_a", "text_b")
  OPTIONS = ("label_list", "pair", "regression")

  def __init__(self, tokenizer, model, max_seq_length, label_list=None, pair=True,
               regression=False, task="glue"):
    super().__init__(task, tokenizer, model, max_seq_length, label_list, pair, regression,
                     inputs=self.INPUTS if pair else self.INPUTS[:1], name="classifier_server")
    self.regression = regression
    self.label_names = tf.constant(label_list or ["score"], tf.string)

  def _inputs(self, text_a, text_b=None):
    segments = [self.tokenizer.ragged_ids(text_a)]
    single = fast_tokenization.pack_inputs(segments, self.max_seq_length, self.cls_id, self.sep_id)
    if text_b is None:
      return single
    segments.append(self.tokenizer.ragged_ids(text_b))
    pair = fast_tokenization.pack_inputs(segments, self.max_seq_length, self.cls_id, self.sep_id)
    has_b = (segments[1].row_lengths() > 0)[:, tf.newaxis]
    return {name: tf.where(has_b, pair[name], single[name]) for name in pair}

  def _serve(self, text_a, text_b=None):
    logits = self.model(heads.trimmed_inputs(self._inputs(text_a, text_b)),
                        training=False)["logits"]
    return classifier_outputs(logits, self.label_names, self.regression)

  @classmethod
  def serves(cls, inputs):
    return "text_a" in inputs and set(inputs) <= set(cls.INPUTS)

  @classmethod
  def predictor_inputs(cls, predictor, texts=None, text_b=None, **others):
    """{text_a[, text_b]} of p(texts), p(texts, text_b=[...]) or p([(text_a, text_b), ...])."""
    text_server.no_other_inputs(predictor, others)
    texts = text_server.as_list(texts, "texts")
    if any(isinstance(t, (tuple, list)) for t in texts):
      if text_b is not None:
        raise BertTfError("texts: give (text_a, text_b) pairs, or texts and text_b=, not both")
      for i, t in enumerate(texts):
        if not isinstance(t, (tuple, list)) or len(t) != 2:
          raise BertTfError(f"texts[{i}]: expected a (text_a, text_b) pair (give pairs, or texts "
                            f"and text_b=), got {type(t).__name__} {str(t)[:40]!r}")
      texts, text_b = [t[0] for t in texts], [t[1] for t in texts]
    texts = text_server.strings(texts, "texts")
    if text_b is not None and not predictor.pair:
      raise BertTfError("text_b: this classifier's task takes one text per input, not pairs")
    inputs = {"text_a": texts}
    if predictor.pair:  # an empty text_b is packed as one text, as run_classifier does
      inputs["text_b"] = ([""] * len(texts) if text_b is None
                          else text_server.strings(text_b, "text_b"))
    return inputs

  @classmethod
  def predictor_result(cls, predictor, row):
    if predictor.regression:
      return {"score": float(row["scores"])}
    probabilities = [float(p) for p in row["probabilities"]]
    names = predictor.label_list or [str(i) for i in range(len(probabilities))]
    return {"label": text_server.text(row["labels"]),
            "score": probabilities[int(row["label_ids"])],
            "scores": dict(zip(names, probabilities))}


def classifier_outputs(logits, label_names, regression=False):
  """The classifier's outputs from its logits [B, num_labels]: regression scores, or
  probabilities, label ids and label names (label_names: tf.string [num_labels])."""
  if regression:
    return {"scores": logits[:, 0]}
  label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return {"probabilities": tf.nn.softmax(logits, axis=-1), "label_ids": label_ids,
          "labels": tf.gather(label_names, label_ids)}

"""The server of sentence-embedding models (embeddings.EmbeddingTask.server_class): raw texts ->
unit-length vectors, ready for a vector index (their dot products are cosines).

  serving_default(text) -> embeddings [B, H] float32, each of length 1
  tokenize(text) -> the model's inputs, one row per text ([CLS] text [SEP])

A text is truncated to max_seq_length - 2 pieces, never an error; an empty string is a valid
input. The model (sentence_encoder.SentenceEncoder without pooling: the encoder's token vectors,
which a --tflite export's model.tflite also gives) runs on the batch's longest text only; the
pooling (the server's `pooling` option, the model's own) and the normalisation run here, in the
graph, so an export's and a TensorFlow Lite server's vectors are the same computation.
"""
import numpy as np

from bert_tf.model import heads
from bert_tf.tasks import sentence_encoder
from bert_tf.tasks import text_server
from bert_tf.text import fast_tokenization


class EmbeddingServer(text_server.TextServer):
  """Raw texts -> unit-length sentence vectors."""

  INPUTS = ("text",)
  OPTIONS = ("pooling",)

  def __init__(self, tokenizer, model, max_seq_length, pooling="mean", task="embeddings"):
    super().__init__(task, tokenizer, model, max_seq_length, name="embedding_server")
    self.pooling = pooling

  def _inputs(self, text):
    return fast_tokenization.pack_inputs([self.tokenizer.ragged_ids(text)], self.max_seq_length,
                                         self.cls_id, self.sep_id)

  def _serve(self, text):
    inputs = heads.trimmed_inputs(self._inputs(text))
    sequence = self.model(inputs, training=False)["sequence_output"]  # [B, t, H]
    pooled = sentence_encoder.pool(sequence, inputs["input_mask"], self.pooling)
    return {"embeddings": sentence_encoder.normalized(pooled)}

  @classmethod
  def serves(cls, inputs):
    """False: an export of this server always has info(); an export without it that takes
    "text" is an NER tagger's (ner_server's, which came first)."""
    return False

  @classmethod
  def predictor_inputs(cls, predictor, texts=None, **others):
    """{text} of p(texts) (or predictor.embed(texts))."""
    text_server.no_other_inputs(predictor, others)
    return {"text": text_server.strings(texts, "texts")}

  @classmethod
  def predictor_result(cls, predictor, row):
    """One text's vector: float32 [H]."""
    return np.asarray(row["embeddings"], np.float32)

"""The server of run_ner.py's models (conll.NerTask.server_class): raw sentence -> its whitespace
words and one tag per word, sentences of any length.

  serving_default(text) -> words [B, W] string, tags [B, W] string, num_words [B].
  tokenize(same inputs) -> the model's inputs, one row per window, with example_index [rows] (each
  window's input).

The text is split on whitespace (str.split's characters) into words, each word's first piece
carries its tag (as run_ner). A text longer than max_seq_length - 2 pieces is windowed as run_ner
windows a long sentence (conll.window_spans: labelled chunks of half a window with context on both
sides), every word tagged in its chunk's window. All windows of the batch go through the model
together, on the batch's longest sequence only (padding changes no result).

The windows as TensorFlow ops (ner_windows), as run_ner's: a sentence that fits in
max_seq_length - 2 pieces is one window; a longer one is cut greedily into chunks of at most half a
window (a word longer than that is a chunk of its own), each labelled in one window that adds as
many whole words of context as fit, half the room on the left first, then the rest on the right.
Each word takes its tag from its chunk's window.
"""
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import heads
from bert_tf.tasks import text_server
from bert_tf.text import fast_tokenization

# str.split()'s whitespace, for NER words (RE2 syntax).
_STR_SPLIT_WHITESPACE = (r"[\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
                         r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+")


class NerServer(text_server.TextServer):
  """Raw sentence -> its whitespace words and one tag per word (the first piece's prediction)."""

  INPUTS = ("text",)
  OPTIONS = ("label_list",)

  def __init__(self, tokenizer, model, max_seq_length, label_list, task="ner"):
    super().__init__(task, tokenizer, model, max_seq_length, label_list, name="ner_server")
    self.label_names = tf.constant(label_list, tf.string)

  def _features(self, text):
    tf_text = fast_tokenization.tf_text_module()
    words, begin, end = tf_text.regex_split_with_offsets(text_server.nul_safe(text),
                                                         _STR_SPLIT_WHITESPACE)
    # The words as given (a NUL stays a NUL).
    words = words.with_values(tf.strings.substr(
        tf.gather(text, words.value_rowids()), begin.flat_values,
        end.flat_values - begin.flat_values))  # [B, (W)]
    word_ids = self.tokenizer.ragged_ids(words.flat_values)  # [all words, (pieces)]
    # As conll.word_pieces: a word the tokenizer drops is [UNK]; at most max_seq_length - 2 pieces.
    empty = tf.equal(word_ids.row_lengths(), 0)
    unk = tf.RaggedTensor.from_row_lengths(
        tf.fill(tf.reshape(tf.reduce_sum(tf.cast(empty, tf.int32)), [1]), self.unk_id),
        tf.cast(empty, tf.int64))
    word_ids = tf.concat([word_ids, unk], axis=1)[:, :self.max_seq_length - 2]
    window_ids, window_text, word_window, word_position = ner_windows(
        word_ids, words.row_splits, self.max_seq_length - 2)
    inputs = fast_tokenization.pack_inputs([window_ids], self.max_seq_length, self.cls_id,
                                           self.sep_id)
    inputs["example_index"] = tf.cast(window_text, tf.int32)
    return inputs, words, tf.stack([word_window, word_position], axis=1)

  def _inputs(self, text):
    return self._features(text)[0]

  def _serve(self, text):
    inputs, words, tag_at = self._features(text)
    logits = self.model(heads.trimmed_inputs(inputs), training=False)["logits"]
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [windows, t]
    tags = words.with_values(tf.gather(self.label_names, tf.gather_nd(predicted, tag_at)))
    return {"words": words.to_tensor(default_value=""), "tags": tags.to_tensor(default_value=""),
            "num_words": tf.cast(words.row_lengths(), tf.int32)}


  @classmethod
  def predictor_inputs(cls, predictor, texts=None, text_b=None, **others):
    """{text} of p(sentences)."""
    text_server.no_other_inputs(predictor, others)
    texts = text_server.strings(texts, "texts")
    if text_b is not None:
      raise BertTfError("text_b: an NER predictor takes one sentence per input")
    return {"text": texts}

  @classmethod
  def predictor_result(cls, predictor, row):
    count = int(row["num_words"])
    return [(text_server.text(word), text_server.text(tag))
            for word, tag in zip(row["words"][:count], row["tags"][:count])]


# ---------------------------------------------------------------------------------------- windows


def _searchsorted(sorted_values, values, side):
  """Indexes in the 1-D sorted_values of the 1-D values (tf.searchsorted wants rows)."""
  return tf.searchsorted(sorted_values[tf.newaxis], values[tf.newaxis], side=side,
                         out_type=tf.int64)[0]


def _ner_chunks(cum, begin, end, max_tokens):
  """conll.window_spans' labelled chunks [C] (first word, end word), sentence-major, and each
  chunk's sentence; cum [N + 1] are the pieces before each word (all sentences in a row), begin and
  end [B] each sentence's words. A sentence with no words has one empty chunk."""
  total = tf.gather(cum, end) - tf.gather(cum, begin)
  half = max_tokens // 2

  def next_start(start):
    # The first word i > start with cum[i + 1] - cum[start] > half, or the sentence's end.
    i = _searchsorted(cum[1:], tf.gather(cum, start) + half, "right")
    i = tf.maximum(i, start + 1)
    return tf.minimum(tf.where(total <= max_tokens, end, i), end)

  def body(step, start, starts, ends, actives):
    following = next_start(start)
    active = start < end
    return (step + 1, tf.where(active, following, start), starts.write(step, start),
            ends.write(step, following), actives.write(step, active))

  first_end = next_start(begin)
  arrays = [tf.TensorArray(dtype, size=0, dynamic_size=True, element_shape=begin.shape)
            for dtype in (tf.int64, tf.int64, tf.bool)]
  arrays = [arrays[0].write(0, begin), arrays[1].write(0, first_end),
            arrays[2].write(0, tf.ones_like(begin, tf.bool))]
  _, _, starts, ends, actives = tf.while_loop(
      lambda step, start, *_: tf.reduce_any(start < end), body,
      (tf.constant(1), first_end, *arrays))
  keep = tf.transpose(actives.stack())  # [B, steps]
  sentence = tf.broadcast_to(tf.range(tf.size(begin, out_type=tf.int64))[:, tf.newaxis],
                             tf.shape(keep, out_type=tf.int64))
  return (tf.boolean_mask(tf.transpose(starts.stack()), keep),
          tf.boolean_mask(tf.transpose(ends.stack()), keep), tf.boolean_mask(sentence, keep))


def ner_windows(word_ids, sentence_splits, max_tokens):
  """run_ner's windows over sentences of any length.

  word_ids: RaggedTensor [N, (pieces)], every word of every sentence in a row, each with 1 to
  max_tokens pieces; sentence_splits [B + 1]: the sentences' row splits into those words.
  Returns (window_ids RaggedTensor [C, (pieces)], window_sentence [C], word_window [N],
  word_position [N]): the pieces of each window (without [CLS] / [SEP]), its sentence, and where
  each word's tag is read (its window, and its first piece's position there, [CLS] being 0).
  """
  counts = word_ids.row_lengths()
  cum = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(counts)], 0)
  splits = tf.cast(sentence_splits, tf.int64)
  begin, end = splits[:-1], splits[1:]
  start, stop, sentence = _ner_chunks(cum, begin, end, max_tokens)
  # Context around each chunk: as many whole words as fit, half the room on the left first.
  room = max_tokens - (tf.gather(cum, stop) - tf.gather(cum, start))
  first = tf.maximum(tf.gather(begin, sentence),
                     _searchsorted(cum, tf.gather(cum, start) - room // 2, "left"))
  room -= tf.gather(cum, start) - tf.gather(cum, first)
  last = tf.minimum(tf.gather(end, sentence),
                    _searchsorted(cum, tf.gather(cum, stop) + room, "right") - 1)
  piece_range = tf.ragged.range(tf.gather(cum, first), tf.gather(cum, last))
  window_ids = tf.gather(word_ids.flat_values, piece_range)
  words = tf.range(tf.size(counts, out_type=tf.int64))
  word_window = _searchsorted(start, words, "right") - 1
  word_position = 1 + cum[:-1] - tf.gather(tf.gather(cum, first), word_window)
  return window_ids, sentence, word_window, word_position

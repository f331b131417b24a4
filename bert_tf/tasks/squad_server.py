"""The server of run_squad.py's models (squad.SquadTask.server_class): (question, context) -> the
answer cut from the context, its score and the no-answer decision, contexts of any length.

  serving_default(question, context) -> answer [B] string, score [B] (best start + end logit),
  null_score_diff [B] (null score - score, as null_odds.json), has_answer [B] bool.
  tokenize(same inputs) -> the model's inputs, one row per window, with example_index [rows] (each
  window's input).

All windows of the batch go through the model together, at the full max_seq_length, as run_squad
runs them. check_lengths is the rule of the lengths that run_squad.py's windows and this server's
share.

SQuAD, compared with run_squad.py's Python post-processing (squad.postprocess):
  * Windows: the question is cut to max_query_length pieces; the context is cut into windows of
    max_seq_length - 3 - question pieces that slide by doc_stride (an export option, as run_squad's
    --doc_stride), each [CLS] question [SEP] window [SEP], run at the full max_seq_length as
    run_squad runs them. An empty context is one empty window (run_squad makes none).
  * The span is chosen as run_squad chooses it: in every window, among the n_best_size largest
    start logits and the n_best_size largest end logits (over all max_seq_length positions, as
    run_squad, hence no trimming of the padding), the pairs of context pieces with end >= start and
    at most max_answer_length pieces whose start has its maximum context in that window
    (check_is_max_context); the pair with the largest start + end logit over all windows wins.
    n_best_size=0 searches all pairs. The null score is the smallest [CLS] start + end logit over
    the windows, as run_squad's SQuAD 2.0 null.
  * The answer text is cut from the raw context: each context piece knows its whitespace word (the
    context is split on whitespace as run_squad splits it) and its characters in that word, since
    the pieces of a word spell its normalized text (an [UNK] spells its whole basic token) and
    normalization keeps one character per character. run_squad instead finds the detokenized
    pieces in the words' basic tokens (get_final_text). Both give the same text, except that
    (a) the raw whitespace between the answer's words is kept (run_squad joins them with " "),
    (b) where a word's normalized text does not have as many characters as the word (a control or
    non-breaking space character inside the word, Hangul decomposed by NFD), the answer keeps that
    whole word while run_squad falls back to whole words when this happens anywhere in the span,
    (c) a span with an [UNK] piece is cut precisely while run_squad returns the whole words, and
    (d) run_squad's str.find takes the first occurrence of the predicted text in the words, which
    differs only in case or accents from the right one. `has_answer` is false when
    null_score_diff > null_score_diff_threshold (None: the model is SQuAD 1.1 style and always
    answers) or when no span is valid (e.g. an empty context): then score is 0 and null_score_diff
    is the null score, as run_squad's null_odds (its v1.1 answer is then "empty").

The windows as TensorFlow ops (squad_windows and best_spans; in Python squad.doc_windows,
check_is_max_context and squad_answers._candidates): windows of max_seq_length - 3 - question pieces
slide by doc_stride over the context; a piece is a start candidate only in the window that gives it
the most context (the smaller of its left and right context plus 0.01 x the window's length; the
first window on ties); among the n_best_size largest start and end logits of every window (all of
its max_seq_length positions), the pair of context pieces with end >= start, at most
max_answer_length pieces long, with the largest start + end logit over all windows wins. The null
score is the smallest [CLS] start + end logit over the windows (run_squad's SQuAD 2.0 null).
"""
from absl import logging
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import heads
from bert_tf.tasks import text_server
from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization

# run_squad's split_context whitespace.
_SQUAD_WHITESPACE = r"[ \t\r\n\x{202f}]+"


def check_lengths(max_seq_length, doc_stride, max_query_length):
  """Raises BertTfError for flag values that cannot make features (a question of
  --max_query_length pieces would leave no room for the context: the original loops forever on
  it); warns where the original's windows do not overlap."""
  if max_seq_length <= max_query_length + 3:
    raise BertTfError(f"--max_seq_length ({max_seq_length}) must be greater than "
                      f"--max_query_length ({max_query_length}) + 3")
  max_tokens_for_doc = max_seq_length - max_query_length - 3
  if doc_stride >= max_tokens_for_doc:
    logging.warning("--doc_stride (%d) is not less than max_seq_length - max_query_length - 3 = "
                    "%d, the room left for the context: windows will not overlap (as in the "
                    "original), so an answer across a window boundary cannot be found; a "
                    "--doc_stride of about half of that is usual", doc_stride, max_tokens_for_doc)


def _piece_char_lengths(vocab):
  """Characters each vocab entry spells in a word (## stripped); -1 for [UNK]."""
  lengths = []
  for token in tokenization.tokens_by_id(vocab):  # by id: a repeated token leaves an id unused
    lengths.append(-1 if token == "[UNK]" else len(token[2:] if token.startswith("##") else token))
  return tf.constant(lengths, tf.int32)


class SquadServer(text_server.TextServer):
  """(question, context) -> answer text cut from the context, its score, the no-answer decision.
  Its lengths obey check_lengths (the ranges of each are SquadOptions')."""

  INPUTS = ("question", "context")
  OPTIONS = ("max_query_length", "doc_stride", "max_answer_length", "n_best_size",
             "null_score_diff_threshold")

  def __init__(self, tokenizer, model, max_seq_length, max_query_length=64, max_answer_length=30,
               n_best_size=20, null_score_diff_threshold=None, doc_stride=128, task="squad"):
    check_lengths(max_seq_length, doc_stride, max_query_length)
    super().__init__(task, tokenizer, model, max_seq_length, name="squad_server")
    self.doc_stride = doc_stride
    self.max_query_length = max_query_length
    self.max_answer_length = max_answer_length
    self.n_best_size = n_best_size
    self.null_score_diff_threshold = null_score_diff_threshold
    self.piece_lengths = _piece_char_lengths(tokenizer.vocab)

  def _context_pieces(self, context):
    """Context pieces [B, (P)] with their word (index in its example) and character span in it.

    Also the words' byte offsets in the context and whether each word's characters map one to one
    onto its normalized text.
    """
    tf_text = fast_tokenization.tf_text_module()
    words, word_begin, _ = tf_text.regex_split_with_offsets(text_server.nul_safe(context),
                                                            _SQUAD_WHITESPACE)
    flat_words = words.flat_values
    basic = self.tokenizer.words(flat_words)  # [all words, (basic tokens)]
    # A basic token's pieces are those ragged_ids gives for it alone (normalization is idempotent).
    ids = self.tokenizer.ragged_ids(basic.flat_values)  # [basic tokens, (pieces)]
    basic_lengths = tf.strings.length(basic.flat_values, unit="UTF8_CHAR")
    piece_lengths = tf.gather(self.piece_lengths, ids.flat_values)
    piece_lengths = tf.where(piece_lengths < 0,
                             tf.repeat(basic_lengths, ids.row_lengths()), piece_lengths)
    word_pieces = basic.with_values(ids).merge_dims(1, 2)  # [all words, (pieces)]
    ends = tf.cumsum(piece_lengths)
    starts = ends - piece_lengths
    # Each word's first piece (a word may have none: pad for the last one).
    word_offset = tf.gather(tf.concat([starts, [0]], 0), word_pieces.row_starts())
    piece_words = tf.cast(word_pieces.value_rowids(), tf.int32)
    starts -= tf.gather(word_offset, piece_words)
    ends -= tf.gather(word_offset, piece_words)
    word_chars = tf.strings.length(flat_words, unit="UTF8_CHAR")
    normalized_chars = tf.reduce_sum(tf.RaggedTensor.from_row_splits(
        basic_lengths, basic.row_splits), axis=1)
    aligned = tf.equal(normalized_chars, word_chars)
    # Word index within its example, per piece.
    word_in_example = (tf.range(tf.size(flat_words, out_type=tf.int64)) -
                       tf.gather(words.row_starts(), words.value_rowids()))
    pieces = words.with_values(word_pieces).merge_dims(1, 2)  # [B, (P)]
    piece_info = {
        "word": pieces.with_values(tf.cast(tf.gather(word_in_example, piece_words), tf.int32)),
        "start": pieces.with_values(starts), "end": pieces.with_values(ends)}
    word_info = {"text": words, "begin": word_begin, "chars": words.with_values(word_chars),
                 "aligned": words.with_values(aligned)}
    return pieces, piece_info, word_info

  def _features(self, question, context):
    """The windows' model inputs (with example_index, each window's example) and what the
    span search and the answer text need."""
    query = self.tokenizer.ragged_ids(question)[:, :self.max_query_length]
    pieces, piece_info, word_info = self._context_pieces(context)
    query_lengths = query.row_lengths()
    windows, max_context = squad_windows(
        pieces.row_lengths(), self.max_seq_length - 3 - query_lengths, self.doc_stride)
    begin = tf.gather(pieces.row_starts(), windows["example"]) + windows["start"]
    window_pieces = tf.gather(pieces.flat_values,
                              tf.ragged.range(begin, begin + windows["length"]))
    inputs = fast_tokenization.pack_inputs([tf.gather(query, windows["example"]), window_pieces],
                                           self.max_seq_length, self.cls_id, self.sep_id)
    inputs["example_index"] = tf.cast(windows["example"], tf.int32)
    windows["context_begin"] = tf.gather(query_lengths, windows["example"]) + 2
    return inputs, windows, max_context, pieces, piece_info, word_info

  def _inputs(self, question, context):
    return self._features(question, context)[0]

  def _serve(self, question, context):
    inputs, windows, max_context, pieces, piece_info, word_info = self._features(question,
                                                                                 context)
    outputs = self.model(heads.encoder_inputs(inputs), training=False)
    found, score, window, start, end, null_score = best_spans(
        outputs["start_logits"], outputs["end_logits"], windows["context_begin"],
        windows["length"], max_context, windows["example"], tf.size(question, out_type=tf.int64),
        self.n_best_size, self.max_answer_length)
    # Context piece indexes of the span (clamped so that examples with no span still gather).
    offset = tf.gather(windows["start"] - windows["context_begin"], window)
    last_piece = tf.maximum(pieces.row_lengths(), 1) - 1
    start_piece = tf.cast(tf.clip_by_value(start + offset, 0, last_piece), tf.int32)
    end_piece = tf.cast(tf.clip_by_value(end + offset, 0, last_piece), tf.int32)
    answer = self._answer_text(context, start_piece, end_piece, piece_info, word_info)
    null_score_diff = tf.cast(null_score - score, tf.float32)
    has_answer = found
    if self.null_score_diff_threshold is not None:
      has_answer &= null_score_diff <= self.null_score_diff_threshold
    return {"answer": tf.where(has_answer, answer, ""),
            "score": tf.where(found, tf.cast(score, tf.float32), 0.0),
            "null_score_diff": tf.where(found, null_score_diff, tf.cast(null_score, tf.float32)),
            "has_answer": has_answer}

  def _answer_text(self, context, start_piece, end_piece, piece_info, word_info):
    """The raw context from the start piece's first character to the end piece's last one."""

    def at(ragged, index):  # ragged [B, (n)] at int [B]; 0 for an empty row
      dense = ragged.to_tensor()
      index = tf.minimum(index, tf.maximum(tf.shape(dense)[1] - 1, 0))
      padded = tf.pad(dense, [[0, 0], [0, 1]])
      return tf.gather(padded, index[:, tf.newaxis], batch_dims=1)[:, 0]

    def byte_offset(word, char):
      text = at(word_info["text"], word)
      begin = tf.cast(at(word_info["begin"], word), tf.int32)
      prefix = tf.strings.substr(text, tf.zeros_like(char), char, unit="UTF8_CHAR")
      return begin + tf.strings.length(prefix)

    start_word = at(piece_info["word"], start_piece)
    end_word = at(piece_info["word"], end_piece)
    # A word whose characters do not map onto its pieces is kept whole.
    start_char = tf.where(at(word_info["aligned"], start_word),
                          at(piece_info["start"], start_piece), 0)
    end_char = tf.where(at(word_info["aligned"], end_word), at(piece_info["end"], end_piece),
                        at(word_info["chars"], end_word))
    begin = byte_offset(start_word, start_char)
    end = byte_offset(end_word, end_char)
    return tf.strings.substr(context, begin, tf.maximum(end - begin, 0))


  @classmethod
  def predictor_inputs(cls, predictor, *texts, question=None, context=None, **others):
    """{question, context} of p(question=..., context=...)."""
    if any(t is not None for t in texts) or any(v is not None for v in others.values()):
      raise BertTfError(f"{predictor.task} predictor: call it as p(question=..., context=...)")
    return {"question": text_server.strings(question, "question"),
            "context": text_server.strings(context, "context")}

  @classmethod
  def predictor_result(cls, predictor, row):
    return {"answer": text_server.text(row["answer"]), "score": float(row["score"]),
            "has_answer": bool(row["has_answer"]),
            "null_score_diff": float(row["null_score_diff"])}


# ---------------------------------------------------------------------------------------- windows


def _first_index_of_max(values, axis=-1):
  """The first index of the largest value along axis (tf.argmax does not promise the first)."""
  best = tf.reduce_max(values, axis=axis, keepdims=True)
  size = tf.shape(values, out_type=tf.int64)[axis]
  shape = [1] * values.shape.rank
  shape[axis] = -1
  iota = tf.reshape(tf.range(size), shape)
  return tf.reduce_min(tf.where(tf.equal(values, best), iota, size), axis=axis)


def squad_windows(num_pieces, room, doc_stride):
  """run_squad's doc_stride windows, one row per window, example-major.

  num_pieces, room: int64 [B], each context's pieces and the pieces a window holds
  (max_seq_length - 3 - the question's pieces). An empty context has one empty window.
  Returns {example, start, length} [W] and max_context bool [W, max(room)]: whether the window
  gives its j-th piece the most context.
  """
  step = tf.minimum(room, doc_stride)
  extra = tf.maximum(num_pieces - room, 0)
  num_windows = 1 + (extra + step - 1) // step  # [B]
  k = tf.range(tf.reduce_max(num_windows))[tf.newaxis]  # [1, K]
  exists = k < num_windows[:, tf.newaxis]  # [B, K]
  starts = k * step[:, tf.newaxis]
  lengths = tf.where(exists, tf.clip_by_value(num_pieces[:, tf.newaxis] - starts, 0,
                                              room[:, tf.newaxis]), 0)
  # Every piece p's best window: the first with the largest min(left, right context) + 0.01 len.
  p = tf.range(tf.reduce_max(num_pieces))[tf.newaxis, tf.newaxis]  # [1, 1, P]
  s, n = starts[:, :, tf.newaxis], lengths[:, :, tf.newaxis]
  inside = (p >= s) & (p < s + n)
  score = (tf.cast(tf.minimum(p - s, s + n - 1 - p), tf.float64) +
           0.01 * tf.cast(n, tf.float64))
  best = _first_index_of_max(tf.where(inside, score, -1.0), axis=1)  # [B, P]
  width = tf.reduce_max(room)
  j = tf.range(width)[tf.newaxis, tf.newaxis]
  best = tf.pad(best, [[0, 0], [0, 1]])  # position P: past every context, gathers stay in range
  position = tf.minimum(starts[:, :, tf.newaxis] + j, tf.reduce_max(num_pieces))
  best_of_position = tf.gather(best, position, batch_dims=1)  # [B, K, width]
  max_context = (best_of_position == k[:, :, tf.newaxis]) & (j < lengths[:, :, tf.newaxis])
  example = tf.broadcast_to(tf.range(tf.size(num_pieces, out_type=tf.int64))[:, tf.newaxis],
                            tf.shape(exists, out_type=tf.int64))
  return ({"example": tf.boolean_mask(example, exists), "start": tf.boolean_mask(starts, exists),
           "length": tf.boolean_mask(lengths, exists)}, tf.boolean_mask(max_context, exists))


# The score of no span: finite, as unsorted_segment_max's result for -inf is the lowest float.
_NO_SPAN = tf.float64.min


def _top_positions(logits, n_best_size):
  """Whether each position is among its row's n_best_size largest logits (all when 0); ties
  keep the lower position first, as run_squad's stable sort."""
  if not n_best_size:
    return tf.ones_like(logits, tf.bool)
  seq_length = logits.shape[-1]
  top = tf.math.top_k(logits, k=min(n_best_size, seq_length)).indices
  return tf.reduce_any(top[:, :, tf.newaxis] == tf.range(seq_length)[tf.newaxis, tf.newaxis],
                       axis=1)


def best_spans(start_logits, end_logits, context_begin, context_length, max_context,
               window_example, num_examples, n_best_size, max_answer_length):
  """run_squad's best span of each example over its windows.

  start_logits, end_logits: [W, S] (S static); context_begin, context_length [W]: where each
  window's context pieces are in its input; max_context bool [W, width]: those of them (by offset)
  that may start an answer in this window; window_example [W]; num_examples: B.
  Returns (found [B], score float64 [B], window [B], start [B], end [B], null float64 [B]): the
  best span's window and its start and end positions in that window's input (score -inf where no
  span is valid: the lowest float64), and the smallest [CLS] start + end logit over the example's windows.
  """
  start_logits = tf.cast(start_logits, tf.float64)  # run_squad adds Python floats
  end_logits = tf.cast(end_logits, tf.float64)
  seq_length = start_logits.shape[-1]
  positions = tf.range(seq_length, dtype=tf.int64)[tf.newaxis]  # [1, S]
  offset = positions - context_begin[:, tf.newaxis]
  in_context = (offset >= 0) & (offset < context_length[:, tf.newaxis])
  width = tf.shape(max_context, out_type=tf.int64)[1]
  is_max = tf.gather(tf.pad(max_context, [[0, 0], [0, 1]]),
                     tf.where(in_context, offset, width), batch_dims=1)
  starts_ok = in_context & is_max & _top_positions(start_logits, n_best_size)
  ends_ok = in_context & _top_positions(end_logits, n_best_size)
  # Spans as [W, start, length - 1]: only those of at most max_answer_length pieces.
  band = min(max_answer_length, seq_length)
  end_index = positions[0, :, tf.newaxis] + tf.range(band, dtype=tf.int64)[tf.newaxis]  # [S, L]
  inside = end_index < seq_length
  end_index = tf.minimum(end_index, seq_length - 1)
  valid = (starts_ok[:, :, tf.newaxis] & tf.gather(ends_ok, end_index, axis=1) &
           inside[tf.newaxis])
  scores = tf.where(valid, start_logits[:, :, tf.newaxis] + tf.gather(end_logits, end_index,
                                                                      axis=1),
                    _NO_SPAN)
  flat = tf.reshape(scores, [-1, seq_length * band])
  window_best = tf.reduce_max(flat, axis=1)
  window_arg = _first_index_of_max(flat)  # [W]
  best = tf.math.unsorted_segment_max(window_best, window_example, num_examples)
  num_windows = tf.size(window_example, out_type=tf.int64)
  is_best = tf.equal(window_best, tf.gather(best, window_example))
  window = tf.math.unsorted_segment_min(
      tf.where(is_best, tf.range(num_windows), num_windows), window_example, num_examples)
  arg = tf.gather(window_arg, window)
  start = arg // band
  null = tf.math.unsorted_segment_min(start_logits[:, 0] + end_logits[:, 0], window_example,
                                      num_examples)
  return best > _NO_SPAN, best, window, start, start + arg % band, null

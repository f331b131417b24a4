"""Inputs of any length in the exported graphs (bert_tf/tasks/servers.py): run_ner's and run_squad's
windows, their max-context rule and run_squad's span search over all windows, as TensorFlow ops.

NER (bert_tf.tasks.conll.window_spans): a sentence that fits in max_seq_length - 2 pieces is one
window; a longer one is cut greedily into chunks of at most half a window (a word longer than that
is a chunk of its own), each labelled in one window that adds as many whole words of context as
fit, half the room on the left first, then the rest on the right. Each word takes its tag from its
chunk's window.

SQuAD (bert_tf.tasks.squad.doc_windows, check_is_max_context, squad_answers._candidates): windows of
max_seq_length - 3 - question pieces slide by doc_stride over the context; a piece is a start
candidate only in the window that gives it the most context (the smaller of its left and right
context plus 0.01 x the window's length; the first window on ties); among the n_best_size largest
start and end logits of every window (all of its max_seq_length positions), the pair of context
pieces with end >= start, at most max_answer_length pieces long, with the largest start + end
logit over all windows wins. The null score is the smallest [CLS] start + end logit over the
windows (run_squad's SQuAD 2.0 null).
"""
import tensorflow as tf


def _searchsorted(sorted_values, values, side):
  """Indexes in the 1-D sorted_values of the 1-D values (tf.searchsorted wants rows)."""
  return tf.searchsorted(sorted_values[tf.newaxis], values[tf.newaxis], side=side,
                         out_type=tf.int64)[0]


def _first_index_of_max(values, axis=-1):
  """The first index of the largest value along axis (tf.argmax does not promise the first)."""
  best = tf.reduce_max(values, axis=axis, keepdims=True)
  size = tf.shape(values, out_type=tf.int64)[axis]
  shape = [1] * values.shape.rank
  shape[axis] = -1
  iota = tf.reshape(tf.range(size), shape)
  return tf.reduce_min(tf.where(tf.equal(values, best), iota, size), axis=axis)


# ---------------------------------------------------------------------------------------- NER


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


# ---------------------------------------------------------------------------------------- SQuAD


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

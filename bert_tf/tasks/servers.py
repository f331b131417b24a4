"""The servers bert_tf.serving.export saves (the building blocks a task's make_server names, see
bert_tf.tasks.base): tokenization, the model and the post-processing in one tf.Module.

Users of the original asked for TF Serving export: its Estimator predict path rebuilt the graph on
every call. An export here is one tf.Module whose signatures take tf.string tensors [B] and run
FastTokenizer.ragged_ids (tensorflow-text, the same ids as FullTokenizer) and pack_inputs in the
graph, so a client needs nothing of bert_tf:

  classifier  serving_default(text_a[, text_b]) -> probabilities [B, N] float32, label_ids [B],
              labels [B] string (a regression task, STS-B: scores [B]). text_b is an input only for
              the tasks whose data are pairs; an empty text_b is packed as a single text, as
              run_classifier does (`if tokens_b`).
  squad       serving_default(question, context) -> answer [B] string, score [B] (best start +
              end logit), null_score_diff [B] (null score - score, as null_odds.json), has_answer
              [B] bool.
  ner         serving_default(text) -> words [B, W] string, tags [B, W] string, num_words [B].
  every task  tokenize(same inputs) -> input_ids, input_mask, segment_ids [rows, max_seq_length]:
              the model's inputs, to check the in-graph tokenization against FullTokenizer; one
              row per input for a classifier, one per window for SQuAD and NER, which also give
              example_index [rows] (each window's input).
  info()      (a function saved with the module, not a signature) -> task, label_list, pair,
              regression: what bert_tf.serving.predictor reads to call an export.

Classifier inputs are truncated as run_classifier truncates them (one text to max_seq_length - 2
pieces; a pair longest-first), never an error; an empty string is a valid input ([CLS] [SEP]). SQuAD
contexts and NER texts of any length are served whole: they are cut into run_squad's and run_ner's
windows in the graph (bert_tf/data/windows.py), all windows of the batch go through the model
together, and the tokenize signature gives one row per window with example_index (the window's
input). The models run on the batch's longest sequence only (padding changes no result; SQuAD
keeps the full length, see below).

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

NER: the text is split on whitespace (str.split's characters) into words, each word's first piece
carries its tag (as run_ner). A text longer than max_seq_length - 2 pieces is windowed as run_ner
windows a long sentence (conll.window_spans: labelled chunks of half a window with context on both
sides), every word tagged in its chunk's window.
"""
import tensorflow as tf

from bert_tf.data import windows as window_ops
from bert_tf.errors import BertTfError
from bert_tf.model import heads
from bert_tf.text import fast_tokenization
from bert_tf.text import tokenization

# str.split()'s whitespace, for NER words (RE2 syntax).
_STR_SPLIT_WHITESPACE = (r"[\t\n\x0b\x0c\r\x1c-\x1f \x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
                         r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+")
# run_squad's split_context whitespace.
_SQUAD_WHITESPACE = r"[ \t\r\n\x{202f}]+"


def _nul_safe(texts):
  """regex_split stops at a NUL character: make it U+0001, which is also no whitespace, also
  dropped by the tokenizer, and also one byte."""
  return tf.strings.regex_replace(texts, "\x00", "\x01")


def _string_spec(name):
  return tf.TensorSpec([None], tf.string, name=name)


def _piece_char_lengths(vocab):
  """Characters each vocab entry spells in a word (## stripped); -1 for [UNK]."""
  lengths = []
  for token in tokenization.tokens_by_id(vocab):  # by id: a repeated token leaves an id unused
    lengths.append(-1 if token == "[UNK]" else len(token[2:] if token.startswith("##") else token))
  return tf.constant(lengths, tf.int32)


def _info_function(task, label_list=None, pair=False, regression=False):
  """The server's `info` function (saved with it, not a signature): what bert_tf.serving.predictor needs
  to know of an export, i.e. its task, label names, whether it takes pairs, regression."""
  return tf.function(lambda: {"task": tf.constant(task), "pair": tf.constant(pair),
                              "regression": tf.constant(regression),
                              "label_list": tf.constant(list(label_list or []), tf.string)},
                     input_signature=[])


class ClassifierServer(tf.Module):
  """Raw text(s) -> class probabilities and label names (or regression scores)."""

  def __init__(self, tokenizer, model, max_seq_length, label_list, pair, regression=False):
    super().__init__(name="classifier_server")
    self.tokenizer = tokenizer
    self.model = model
    self.max_seq_length = max_seq_length
    self.regression = regression
    self.label_names = tf.constant(label_list or ["score"], tf.string)
    vocab = tokenizer.vocab
    self.cls_id, self.sep_id = vocab["[CLS]"], vocab["[SEP]"]
    self.info = _info_function("classifier", label_list, pair, regression)
    specs = [_string_spec("text_a")] + ([_string_spec("text_b")] if pair else [])
    self.serve = tf.function(self._serve, input_signature=specs)
    self.tokenize = tf.function(self._pack, input_signature=specs)

  def _pack(self, text_a, text_b=None):
    segments = [self.tokenizer.ragged_ids(text_a)]
    single = fast_tokenization.pack_inputs(segments, self.max_seq_length, self.cls_id, self.sep_id)
    if text_b is None:
      return single
    segments.append(self.tokenizer.ragged_ids(text_b))
    pair = fast_tokenization.pack_inputs(segments, self.max_seq_length, self.cls_id, self.sep_id)
    has_b = (segments[1].row_lengths() > 0)[:, tf.newaxis]
    return {name: tf.where(has_b, pair[name], single[name]) for name in pair}

  def _serve(self, text_a, text_b=None):
    logits = self.model(heads.trimmed_inputs(self._pack(text_a, text_b)), training=False)["logits"]
    return classifier_outputs(logits, self.label_names, self.regression)


def classifier_outputs(logits, label_names, regression=False):
  """The classifier's outputs from its logits [B, num_labels]: regression scores, or
  probabilities, label ids and label names (label_names: tf.string [num_labels])."""
  if regression:
    return {"scores": logits[:, 0]}
  label_ids = tf.argmax(logits, axis=-1, output_type=tf.int32)
  return {"probabilities": tf.nn.softmax(logits, axis=-1), "label_ids": label_ids,
          "labels": tf.gather(label_names, label_ids)}


class SquadServer(tf.Module):
  """(question, context) -> answer text cut from the context, its score, the no-answer decision.
  The lengths are the squad task's to check (squad.check_lengths, SquadTask.make_server)."""

  def __init__(self, tokenizer, model, max_seq_length, max_query_length=64, max_answer_length=30,
               n_best_size=20, null_score_diff_threshold=None, doc_stride=128):
    super().__init__(name="squad_server")
    if doc_stride < 1:
      raise BertTfError(f"--doc_stride: expected an integer of at least 1, got {doc_stride}")
    self.doc_stride = doc_stride
    self.tokenizer = tokenizer
    self.model = model
    self.max_seq_length = max_seq_length
    self.max_query_length = max_query_length
    self.max_answer_length = max_answer_length
    self.n_best_size = n_best_size
    self.null_score_diff_threshold = null_score_diff_threshold
    vocab = tokenizer.vocab
    self.cls_id, self.sep_id, self.unk_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[UNK]"]
    self.piece_lengths = _piece_char_lengths(vocab)
    self.info = _info_function("squad")
    specs = [_string_spec("question"), _string_spec("context")]
    self.serve = tf.function(self._serve, input_signature=specs)
    self.tokenize = tf.function(lambda q, c: self._features(q, c)[0], input_signature=specs)

  def _context_pieces(self, context):
    """Context pieces [B, (P)] with their word (index in its example) and character span in it.

    Also the words' byte offsets in the context and whether each word's characters map one to one
    onto its normalized text.
    """
    tf_text = fast_tokenization.tf_text_module()
    words, word_begin, _ = tf_text.regex_split_with_offsets(_nul_safe(context),
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
    windows, max_context = window_ops.squad_windows(
        pieces.row_lengths(), self.max_seq_length - 3 - query_lengths, self.doc_stride)
    begin = tf.gather(pieces.row_starts(), windows["example"]) + windows["start"]
    window_pieces = tf.gather(pieces.flat_values,
                              tf.ragged.range(begin, begin + windows["length"]))
    inputs = fast_tokenization.pack_inputs([tf.gather(query, windows["example"]), window_pieces],
                                           self.max_seq_length, self.cls_id, self.sep_id)
    inputs["example_index"] = tf.cast(windows["example"], tf.int32)
    windows["context_begin"] = tf.gather(query_lengths, windows["example"]) + 2
    return inputs, windows, max_context, pieces, piece_info, word_info

  def _serve(self, question, context):
    inputs, windows, max_context, pieces, piece_info, word_info = self._features(question,
                                                                                 context)
    outputs = self.model(heads.encoder_inputs(inputs), training=False)
    found, score, window, start, end, null_score = window_ops.best_spans(
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


class NerServer(tf.Module):
  """Raw sentence -> its whitespace words and one tag per word (the first piece's prediction)."""

  def __init__(self, tokenizer, model, max_seq_length, label_list):
    super().__init__(name="ner_server")
    self.tokenizer = tokenizer
    self.model = model
    self.max_seq_length = max_seq_length
    self.label_names = tf.constant(label_list, tf.string)
    vocab = tokenizer.vocab
    self.cls_id, self.sep_id, self.unk_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[UNK]"]
    self.info = _info_function("ner", label_list)
    specs = [_string_spec("text")]
    self.serve = tf.function(self._serve, input_signature=specs)
    self.tokenize = tf.function(lambda text: self._features(text)[0], input_signature=specs)

  def _features(self, text):
    tf_text = fast_tokenization.tf_text_module()
    words, begin, end = tf_text.regex_split_with_offsets(_nul_safe(text), _STR_SPLIT_WHITESPACE)
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
    window_ids, window_text, word_window, word_position = window_ops.ner_windows(
        word_ids, words.row_splits, self.max_seq_length - 2)
    inputs = fast_tokenization.pack_inputs([window_ids], self.max_seq_length, self.cls_id,
                                           self.sep_id)
    inputs["example_index"] = tf.cast(window_text, tf.int32)
    return inputs, words, tf.stack([word_window, word_position], axis=1)

  def _serve(self, text):
    inputs, words, tag_at = self._features(text)
    logits = self.model(heads.trimmed_inputs(inputs), training=False)["logits"]
    predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [windows, t]
    tags = words.with_values(tf.gather(self.label_names, tf.gather_nd(predicted, tag_at)))
    return {"words": words.to_tensor(default_value=""), "tags": tags.to_tensor(default_value=""),
            "num_words": tf.cast(words.row_lengths(), tf.int32)}

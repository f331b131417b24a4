# coding=utf-8
"""Tokenization in TensorFlow ops: the ids of tokenization.FullTokenizer, inside a graph.

`FastTokenizer` runs the original's normalization as TensorFlow string ops in front of
tensorflow-text's FastWordpieceTokenizer, so it can live inside a tf.function / SavedModel.
tensorflow-text's own BertTokenizer folds case with NFKC and cuts words at 100 bytes, unlike the
original (lower + NFD + accent strip, 200 characters), so it is not used. See FastTokenizer for the
characters where TensorFlow's lower-casing or NFD differs from Python's and how they are handled.

`pack_inputs` makes [CLS] A [SEP] B [SEP] model inputs in-graph, truncating as the original.
"""
import functools
import re
import sys
import unicodedata

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.text import tokenization


# Ends each character of one long text that is lower-cased or normalized in a single call, not
# in a per-character loop in Python (a fixed cost of every tokenizer built). It is neither cased
# nor case-ignorable (a capital sigma before it is final, as at the end of a text) and a starter
# for NFD (no reordering across it), so each character maps as it would alone. Not NUL:
# TensorFlow's lower-casing stops there.
_SEP = ord("\n")


def _codepoints_but_separator(first):
  """Every code point from `first` on but the surrogates (not encodable) and _SEP."""
  codepoints = np.arange(first, sys.maxunicode + 1)
  return codepoints[((codepoints < 0xD800) | (codepoints > 0xDFFF)) & (codepoints != _SEP)]


def _text(rows):
  """Code points [n, k] -> one str: each row's characters, then _SEP."""
  rows = np.concatenate([rows, np.full((len(rows), 1), _SEP)], axis=1)
  return rows.astype("<u4").tobytes().decode("utf-32-le")


def _parts(text, count):
  """A text of `count` _SEP-ended parts -> (its code points, each part's start, each one's end)."""
  units = np.frombuffer(text.encode("utf-32-le"), "<u4")
  ends = np.flatnonzero(units == _SEP)
  if len(ends) != count:
    raise RuntimeError(f"{len(ends)} mapped parts for {count} characters")
  return units, np.concatenate([[0], ends[:-1] + 1]), ends


def _parts_differ(ours, theirs):
  """Whether each part of two _parts results differs (in length or in a code point)."""
  (units_a, starts_a, ends_a), (units_b, starts_b, ends_b) = ours, theirs
  same_length = ends_a - starts_a == ends_b - starts_b
  differ = ~same_length
  part = np.repeat(np.arange(len(ends_a)), ends_a - starts_a + 1)  # each of ours' units' part
  offset = np.arange(len(units_a)) - starts_a[part]
  aligned = same_length[part]
  index_b = np.where(aligned, starts_b[part] + offset, 0)
  differ[part[aligned & (units_a != units_b[index_b])]] = True
  return differ


@functools.lru_cache(maxsize=None)
def _fallback_characters():
  """Characters where TensorFlow's lower-casing or NFD (its ICU's Unicode) differs from Python's.

  Found by comparing both on every code point (all in one text, see _SEP; _SEP is ASCII, which
  both map alike): letters added in Unicode 14 (Python 3.11's version) that TensorFlow's ICU does
  not lower-case, and code points unassigned in Unicode 14 that its newer ICU decomposes.
  FastTokenizer's list API sends text holding one to Python.
  """
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
  codepoints = _codepoints_but_separator(first=1)
  text = _text(codepoints[:, None])
  differ = np.zeros(len(codepoints), bool)
  for ours, theirs in ((text.lower(), tf.strings.lower(text, encoding="utf-8")),
                       (unicodedata.normalize("NFD", text), tf_text.normalize_utf8(text, "NFD"))):
    theirs = theirs.numpy().decode("utf-8")
    differ |= _parts_differ(_parts(ours, len(codepoints)), _parts(theirs, len(codepoints)))
  return tuple(codepoints[differ].tolist())


def _sigma_class(char):
  """1 cased, 2 case-ignorable, 0 neither, as str.lower() sees `char` after a capital sigma."""
  if ("\u0391\u03a3" + char).lower()[1] == "\u03c3":  # a cased character after it: σ
    return 1
  if ("\u0391\u03a3" + char + "\u0392").lower()[1] == "\u03c3":  # skipped over: σ
    return 2
  return 0


@functools.lru_cache(maxsize=None)
def _sigma_context_runs():
  """(run starts, run classes) over all code points: _sigma_class of each (0 for surrogates).

  CPython lower-cases U+03A3 to final ς when the nearest character before it that is not
  case-ignorable is cased and the nearest after it that is not case-ignorable is not cased (or
  absent). TensorFlow's ICU applies the same rule with its own, older character properties: ~300
  characters added in Unicode 14 (combining marks such as U+0898, modifier letters, lower-case
  letters) differ, so FastTokenizer decides each sigma itself from these classes. _sigma_class's
  two tests run on all code points at once: "ΑΣ{c}{suffix}" for every c in one text (see _SEP).
  """
  codepoints = _codepoints_but_separator(first=0)

  def sigma_kept(suffix):
    rows = [np.full(len(codepoints), ord(c)) for c in "\u0391\u03a3"] + [codepoints]
    rows += [np.full(len(codepoints), ord(c)) for c in suffix]
    units, starts, _ = _parts(_text(np.stack(rows, axis=1)).lower(), len(codepoints))
    return units[starts + 1] == ord("\u03c3")

  cased, cased_or_skipped = sigma_kept(""), sigma_kept("\u0392")
  classes = np.zeros(sys.maxunicode + 1, np.int64)
  classes[codepoints] = np.where(cased, 1, np.where(cased_or_skipped, 2, 0))
  classes[_SEP] = _sigma_class(chr(_SEP))
  starts = np.concatenate([[0], np.flatnonzero(np.diff(classes)) + 1])
  return tuple(starts.tolist()), tuple(classes[starts].tolist())


class FastTokenizer(tf.Module):
  """FullTokenizer's ids from our normalization in TensorFlow ops + FastWordpieceTokenizer.

  The normalization is the original's, as string ops: invalid UTF-8 dropped, control characters
  dropped, whitespace -> " ", then (do_lower_case) each Greek capital sigma lower-cased to σ or ς
  by Python's own rule and character properties (_sigma_context_runs), tf.strings.lower (ICU full
  lower-casing), NFD and removal of nonspacing marks (Mn), then spaces
  around CJK characters and punctuation and a split on " ". Character classes come from Python's
  unicodedata, so they are the original's exactly. Words over 200 characters become [UNK] as in
  the original (tensorflow-text's own limit is in bytes).

  `ragged_ids` is pure TensorFlow (tf.function / SavedModel). It differs from the original only on
  text with one of the ~60 characters of `_fallback_characters()` (Unicode 14 letters such as
  Vithkuqi, or code points unassigned in Unicode 14); the list API `tokenize_to_ids` / `tokenize`
  detects those texts (and lone surrogates) and tokenizes them with the Python FullTokenizer, so its
  ids always equal the original's.
  """

  def __init__(self, vocab_file, do_lower_case=True, batch_size=4096, name=None):
    super().__init__(name=name)
    import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
    self._python = tokenization.FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    self.do_lower_case = do_lower_case
    self.batch_size = batch_size
    max_chars = self._python.wordpiece_tokenizer.max_input_chars_per_word
    self._max_chars_per_word = max_chars
    # Entries the original can never produce (empty after strip(), a bare "##") become unique
    # unmatchable strings (words never hold a space); ids stay the original's.
    pieces = [token if token and token != "##" else f" unreachable {i}"
              for i, token in enumerate(tokenization.tokens_by_id(self.vocab))]
    # The original's limit is in characters: ragged_ids turns longer words into [UNK] itself, so
    # this byte limit (4 bytes a character at most) never binds.
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        pieces, suffix_indicator="##", max_bytes_per_word=4 * max_chars + 4,
        token_out_type=tf.int32, unknown_token="[UNK]", no_pretokenization=True)
    classes = tokenization.char_classes()
    self._removed_re = tokenization.char_class_regex(classes["removed"], re2=True)
    spaces = sorted(set(classes["whitespace"] + classes["other_space"]) - {ord(" ")})
    self._space_re = tokenization.char_class_regex(spaces, re2=True)
    self._mark_re = tokenization.char_class_regex(classes["mark"], re2=True)
    punctuation = tokenization.codepoint_runs(classes["punctuation"])
    punctuation_and_cjk = punctuation + list(tokenization.CJK_RANGES)
    self._split_re = "(" + tokenization.char_class_regex(punctuation_and_cjk, re2=True) + ")"
    if do_lower_case:
      starts, classes = _sigma_context_runs()
      self._sigma_starts = tf.constant(starts, tf.int32)
      self._sigma_classes = tf.constant(classes, tf.int32)
    unsafe = _fallback_characters() if do_lower_case else ()
    surrogates = (0xD800, 0xDFFF)  # lone surrogates cannot be encoded for TensorFlow
    unsafe_runs = tokenization.codepoint_runs(unsafe) + [surrogates]
    self._fallback_re = re.compile(tokenization.char_class_regex(unsafe_runs))

  # Properties, not attributes: tf.Module would wrap a dict attribute for checkpoint tracking.
  @property
  def vocab(self):
    return self._python.vocab

  @property
  def inv_vocab(self):
    return self._python.inv_vocab

  def normalize(self, texts):
    """tf.string [B] -> [B] text cleaned and (do_lower_case) lower-cased with accents stripped."""
    # Invalid UTF-8 is dropped, as convert_to_unicode decodes bytes with errors="ignore".
    texts = tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="ignore")
    texts = tf.strings.regex_replace(texts, self._removed_re, "")
    texts = tf.strings.regex_replace(texts, self._space_re, " ")
    if self.do_lower_case:
      has_sigma = tf.reduce_any(tf.strings.regex_full_match(texts, "(?s).*\u03a3.*"))
      texts = tf.cond(has_sigma, lambda: self._lower_sigmas(texts), lambda: texts)
      texts = tf.strings.lower(texts, encoding="utf-8")
      texts = tf_text_module().normalize_utf8(texts, "NFD")
      texts = tf.strings.regex_replace(texts, self._mark_re, "")
    return texts

  def _lower_sigmas(self, texts):
    """Each capital sigma lower-cased to σ or final ς as Python's str.lower() does
    (_sigma_context_runs), before ICU's lower-casing sees it."""
    chars = tf.strings.unicode_decode(texts, "UTF-8")
    cps = chars.flat_values
    run = tf.searchsorted(self._sigma_starts, cps, side="right") - 1
    classes = tf.gather(self._sigma_classes, run)
    kept = tf.cast(classes != 2, tf.int32)  # not case-ignorable: what the rule looks at
    positions = tf.cast(tf.where(kept > 0)[:, 0], tf.int32)
    num_kept = tf.size(positions)
    seen = tf.cumsum(kept)  # kept characters up to and including each position
    row_starts = tf.repeat(tf.cast(chars.row_starts(), tf.int32), chars.row_lengths())
    row_limits = tf.repeat(tf.cast(chars.row_limits(), tf.int32), chars.row_lengths())
    before = seen - kept - 1  # index in `positions` of the nearest kept character before
    before_at = tf.gather(positions, tf.clip_by_value(before, 0, tf.maximum(num_kept - 1, 0)))
    cased_before = ((before >= 0) & (before_at >= row_starts) &
                    (tf.gather(classes, before_at) == 1))
    after = seen  # for a kept character (a sigma is), the nearest kept one after it
    after_at = tf.gather(positions, tf.clip_by_value(after, 0, tf.maximum(num_kept - 1, 0)))
    cased_after = ((after < num_kept) & (after_at < row_limits) &
                   (tf.gather(classes, after_at) == 1))
    lowered = tf.where(cased_before & ~cased_after, 0x3C2, 0x3C3)
    cps = tf.where(cps == 0x3A3, lowered, cps)
    return tf.strings.unicode_encode(chars.with_flat_values(cps), "UTF-8")

  def words(self, texts):
    """tf.string [B] -> RaggedTensor [B, (words)]: the BasicTokenizer's output."""
    # The original spaces CJK characters before lower-casing; doing it after, with punctuation, is
    # the same: no character lower-cases or decomposes into a CJK one (checked on every code
    # point), and CJK characters are neither cased nor case-ignorable (Greek final sigma).
    texts = tf.strings.regex_replace(self.normalize(texts), self._split_re, r" \1 ")
    # After normalize the only whitespace left is " ", and split() splits on ASCII whitespace only.
    return tf.strings.split(texts)

  def ragged_ids(self, texts):
    """tf.string [B] -> int32 RaggedTensor [B, (tokens)] of WordPiece ids; graph-only ops."""
    words = self.words(tf.convert_to_tensor(texts, tf.string))
    too_long = tf.strings.length(words.flat_values, unit="UTF8_CHAR") > self._max_chars_per_word
    flat_words = tf.where(too_long, "[UNK]", words.flat_values)
    ids = self._wordpiece.tokenize(flat_words)  # [words, (pieces)]
    return words.with_flat_values(ids).merge_dims(1, 2)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def _batch_ids(self, texts):
    ids = self.ragged_ids(texts)
    return ids.flat_values, ids.row_splits

  def tokenize_to_ids(self, texts):
    """list of str (or bytes) -> list of lists of ids, equal to FullTokenizer's; in batches."""
    texts = [tokenization.convert_to_unicode(text) for text in texts]
    fallback = []
    if self._fallback_re.search("\n".join(texts)):  # one scan for the common case of none
      fallback = [i for i, text in enumerate(texts) if self._fallback_re.search(text)]
    fast_texts = list(texts)
    for i in fallback:
      fast_texts[i] = ""  # tokenized by Python below; lone surrogates cannot reach TensorFlow
    output = []
    for start in range(0, len(texts), self.batch_size):
      batch = tf.constant(fast_texts[start:start + self.batch_size], tf.string)
      flat_ids, row_splits = self._batch_ids(batch)
      flat_ids = flat_ids.numpy().tolist()
      row_splits = row_splits.numpy().tolist()
      output.extend(flat_ids[begin:end] for begin, end in zip(row_splits, row_splits[1:]))
    for i in fallback:
      output[i] = self._python.convert_tokens_to_ids(self._python.tokenize(texts[i]))
    return output

  def tokenize(self, texts):
    """list of str -> list of lists of WordPiece tokens."""
    return [[self.inv_vocab[i] for i in ids] for ids in self.tokenize_to_ids(texts)]


def tf_text_module():
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
  return tf_text


def truncated_pair_lengths(length_a, length_b, max_length):
  """Lengths left by the original's _truncate_seq_pair (pop the longer's last; of equals, b's).

  Works on ints or int tensors. That loop ends with the shorter segment whole (if it fits in half)
  and the longer filling the rest, or with ceil(max/2) tokens of a and floor(max/2) of b.
  """
  keep_a = max_length - max_length // 2
  keep_b = max_length // 2
  if isinstance(length_a, int) and isinstance(length_b, int):
    return (min(length_a, max(max_length - length_b, keep_a)),
            min(length_b, max(max_length - length_a, keep_b)))
  return (tf.minimum(length_a, tf.maximum(max_length - length_b, keep_a)),
          tf.minimum(length_b, tf.maximum(max_length - length_a, keep_b)))


def pack_inputs(segments, seq_length, cls_id, sep_id, padding_id=0):
  """[CLS] A [SEP] (B [SEP]) from 1 or 2 int RaggedTensors [B, (tokens)], as run_classifier.

  Truncates as the original (one segment to seq_length - 2; a pair longest-first to
  seq_length - 3) and returns {"input_ids", "input_mask", "segment_ids"}: int32 [B, seq_length],
  zero-padded. Pure TensorFlow, for a tf.function or SavedModel.
  """
  if len(segments) not in (1, 2):
    raise BertTfError(f"pack_inputs: expected 1 or 2 segments, got {len(segments)}")
  segments = [tf.cast(segment, tf.int32).with_row_splits_dtype(tf.int64) for segment in segments]
  lengths = [tf.cast(segment.row_lengths(), tf.int32) for segment in segments]
  if len(segments) == 1:
    keep = [tf.minimum(lengths[0], seq_length - 2)]
  else:
    keep = list(truncated_pair_lengths(lengths[0], lengths[1], seq_length - 3))
  batch = tf.shape(lengths[0])[:1]
  cls = tf.RaggedTensor.from_tensor(tf.fill(tf.concat([batch, [1]], 0), cls_id))
  sep = tf.RaggedTensor.from_tensor(tf.fill(tf.concat([batch, [1]], 0), sep_id))
  pieces, types = [cls], [tf.zeros_like(cls)]
  for segment_type, (segment, length) in enumerate(zip(segments, keep)):
    positions = tf.ragged.range(tf.cast(segment.row_lengths(), tf.int32))
    segment = tf.ragged.boolean_mask(segment, positions < tf.expand_dims(length, 1))
    pieces += [segment, sep]
    types += [tf.zeros_like(segment) + segment_type, tf.zeros_like(sep) + segment_type]
  input_ids = tf.concat(pieces, axis=1)
  shape = [None, seq_length]
  return {
      "input_ids": input_ids.to_tensor(default_value=padding_id, shape=shape),
      "input_mask": tf.ones_like(input_ids).to_tensor(default_value=0, shape=shape),
      "segment_ids": tf.concat(types, axis=1).to_tensor(default_value=0, shape=shape),
  }

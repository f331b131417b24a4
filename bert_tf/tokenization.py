# coding=utf-8
"""Tokenization: the original BERT BasicTokenizer + WordPiece, and a TensorFlow path, same ids.

`FullTokenizer` gives exactly the output of the original release's tokenization.py
(bert-tensorflow 1.0.4 with its default `--preserve_unused_tokens=False`); it is faster because it
tokenizes each distinct whitespace-separated word once (a word's pieces do not depend on its
neighbours) and uses precomputed character classes.

`FastTokenizer` runs the same normalization as TensorFlow string ops in front of tensorflow-text's
FastWordpieceTokenizer, so it can live inside a tf.function / SavedModel. tensorflow-text's own
BertTokenizer folds case with NFKC and cuts words at 100 bytes, unlike the original (lower + NFD +
accent strip, 200 characters), so it is not used. See FastTokenizer for the characters where
TensorFlow's lower-casing or NFD differs from Python's and how they are handled.

`pack_inputs` makes [CLS] A [SEP] B [SEP] model inputs in-graph, truncating as the original.
"""

import collections
import functools
import re
import sys
import unicodedata

import tensorflow as tf

from bert_tf.errors import BertTfError

_UNUSED_TOKEN_RE = re.compile(r"^\[unused\d+\]$")

# Models whose casing is known from their name (the original's list).
_LOWER_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                 "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                 "multi_cased_L-12_H-768_A-12")

# A word cache this big holds every distinct word of a large corpus shard; past it we stop caching.
_MAX_CACHED_WORDS = 1_000_000

# CJK Unified Ideographs blocks: the original's "Chinese character" (not Hangul or kana).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Raises BertTfError when --do_lower_case contradicts a Google checkpoint's (cased) name."""
  if not init_checkpoint:
    return
  m = re.match("^.*?([A-Za-z0-9_-]+)/bert_model.ckpt", init_checkpoint)
  if m is None:
    return
  model_name = m.group(1)
  if model_name in _LOWER_MODELS and not do_lower_case:
    actual_flag, case_name, opposite_flag = "False", "lowercased", "True"
  elif model_name in _CASED_MODELS and do_lower_case:
    actual_flag, case_name, opposite_flag = "True", "cased", "False"
  else:
    return
  raise BertTfError(
      f"--do_lower_case: you passed `--do_lower_case={actual_flag}` with "
      f"`--init_checkpoint={init_checkpoint}`. However, `{model_name}` seems to be a {case_name} "
      f"model, so you should pass in `--do_lower_case={opposite_flag}` so that the fine-tuning "
      f"matches how the model was pre-trained.")


def convert_to_unicode(text):
  """Converts `text` to str (if it is not already), assuming utf-8 input."""
  if isinstance(text, str):
    return text
  if isinstance(text, bytes):
    return text.decode("utf-8", "ignore")
  raise BertTfError(f"text: unsupported string type {type(text)}")


def printable_text(text):
  """Returns text as a str suitable for print or logging."""
  return convert_to_unicode(text)


def load_vocab(vocab_file):
  """Vocabulary file (a token a line) -> OrderedDict token -> id; a repeat keeps its first id."""
  if not tf.io.gfile.exists(vocab_file):
    raise BertTfError(f"{vocab_file}: vocabulary file not found")
  with tf.io.gfile.GFile(vocab_file, "rb") as reader:
    content = convert_to_unicode(reader.read())
  lines = content.split("\n")
  if lines and not lines[-1]:
    lines.pop()  # the original reads until readline() returns "": a final newline ends no token
  vocab = collections.OrderedDict()
  for line in lines:
    token = line.strip()
    if token not in vocab:
      vocab[token] = len(vocab)
  return vocab


def convert_by_vocab(vocab, items):
  """Converts a sequence of [tokens|ids] using the vocab."""
  return [vocab[item] for item in items]


def convert_tokens_to_ids(vocab, tokens):
  return convert_by_vocab(vocab, tokens)


def convert_ids_to_tokens(inv_vocab, ids):
  return convert_by_vocab(inv_vocab, ids)


def whitespace_tokenize(text):
  """Runs basic whitespace cleaning and splitting on a piece of text."""
  return text.split()


def _is_whitespace(char):
  # \t, \n and \r are control characters, but count as whitespace.
  return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char):
  if char in "\t\n\r":
    return False
  return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
  # All non-letter/number ASCII is punctuation ("^", "$", "`" are not Unicode P*, yet count).
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


@functools.lru_cache(maxsize=None)
def _char_classes():
  """Code points of each character class the tokenizer uses, from unicodedata (as the original)."""
  classes = {"removed": [], "whitespace": [], "other_space": [], "punctuation": [], "mark": []}
  for cp in range(sys.maxunicode + 1):
    char = chr(cp)
    category = unicodedata.category(char)
    if cp == 0 or cp == 0xFFFD or (category in ("Cc", "Cf") and char not in "\t\n\r"):
      classes["removed"].append(cp)
    elif char in " \t\n\r" or category == "Zs":
      classes["whitespace"].append(cp)
    elif char.isspace():  # kept by the cleaning, yet str.split() splits on it (U+2028, U+2029)
      classes["other_space"].append(cp)
    if _is_punctuation(char):
      classes["punctuation"].append(cp)
    if category == "Mn":
      classes["mark"].append(cp)
  return {name: tuple(cps) for name, cps in classes.items()}


def _ranges(codepoints):
  """Sorted code points -> list of inclusive (first, last) runs."""
  runs = []
  for cp in codepoints:
    if runs and runs[-1][1] == cp - 1:
      runs[-1][1] = cp
    else:
      runs.append([cp, cp])
  return [tuple(run) for run in runs]


def char_class_regex(codepoints_or_ranges, re2=False):
  """A regex class "[...]" of exactly these code points, for Python `re` or RE2 (TensorFlow)."""
  items = list(codepoints_or_ranges)
  runs = items if items and isinstance(items[0], tuple) else _ranges(items)
  fmt = (lambda cp: "\\x{%x}" % cp) if re2 else (lambda cp: "\\U%08x" % cp)
  parts = [fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}" for lo, hi in runs]
  return "[" + "".join(parts) + "]"


@functools.lru_cache(maxsize=None)
def _python_patterns():
  classes = _char_classes()
  clean_table = {cp: None for cp in classes["removed"]}
  clean_table.update({cp: " " for cp in classes["whitespace"]})
  return {
      "clean_table": clean_table,
      "cjk": re.compile(char_class_regex(_CJK_RANGES)),
      "punctuation": re.compile("(" + char_class_regex(classes["punctuation"]) + ")"),
      "mark": re.compile(char_class_regex(classes["mark"])),
  }


def _clean_and_space_cjk(text):
  """The original's _clean_text and _tokenize_chinese_chars: no control chars, " ", " 中 "."""
  patterns = _python_patterns()
  text = text.translate(patterns["clean_table"])
  if not text.isascii():
    text = patterns["cjk"].sub(r" \g<0> ", text)
  return text


class BasicTokenizer(object):
  """Runs basic tokenization (punctuation splitting, lower casing, etc.)."""

  def __init__(self, do_lower_case=True, vocab=tuple(), preserve_unused_tokens=False):
    """`vocab` and `preserve_unused_tokens`: keep words like "[unused3]" that are in vocab whole
    (the flag of bert-tensorflow 1.0.4; off by default, as there)."""
    self.do_lower_case = do_lower_case
    self.vocab = vocab
    self.preserve_unused_tokens = preserve_unused_tokens

  def tokenize(self, text):
    """Tokenizes a piece of text."""
    text = _clean_and_space_cjk(convert_to_unicode(text))
    output = []
    for word in text.split():
      output.extend(self.tokenize_word(word))
    return output

  def tokenize_word(self, word):
    """Tokens of one word of cleaned text: lower-cased, accents stripped, punctuation split."""
    if self.preserve_unused_tokens and preserve_token(word, self.vocab):
      return [word]
    if self.do_lower_case:
      word = word.lower()
      if not word.isascii():
        word = _python_patterns()["mark"].sub("", unicodedata.normalize("NFD", word))
    if word.isalnum():
      return [word]
    # Lower-casing and NFD could in principle make whitespace, so split again as the original does.
    pieces = _python_patterns()["punctuation"].split(word)
    return [token for piece in pieces for token in piece.split()]


def preserve_token(token, vocab):
  """True for a token like "[unused12]" that is in vocab (only with preserve_unused_tokens)."""
  return token in vocab and bool(_UNUSED_TOKEN_RE.search(token))


class WordpieceTokenizer(object):
  """Runs WordPiece tokenization: greedy longest-match-first with "##" continuation pieces."""

  def __init__(self, vocab, unk_token="[UNK]", max_input_chars_per_word=200):
    self.vocab = vocab
    self.unk_token = unk_token
    self.max_input_chars_per_word = max_input_chars_per_word
    # No piece longer than the longest vocab entry can match, so the search starts there.
    self._max_piece_chars = max((len(token) for token in vocab), default=0)

  def tokenize(self, text):
    """Tokenizes whitespace-separated words (from BasicTokenizer) into word pieces.

    For example: input = "unaffable", output = ["un", "##aff", "##able"].
    """
    output = []
    for word in convert_to_unicode(text).split():
      output.extend(self.tokenize_word(word))
    return output

  def tokenize_word(self, word):
    if len(word) > self.max_input_chars_per_word:
      return [self.unk_token]
    vocab = self.vocab
    if word in vocab:
      return [word]
    pieces = []
    start = 0
    while start < len(word):
      prefix = "##" if start > 0 else ""
      end = min(len(word), start + self._max_piece_chars - len(prefix))
      while end > start:
        piece = prefix + word[start:end]
        if piece in vocab:
          break
        end -= 1
      if end == start:
        return [self.unk_token]
      pieces.append(piece)
      start = end
    return pieces


class FullTokenizer(object):
  """Runs end-to-end tokenization: BasicTokenizer then WordPiece, exactly as the original."""

  def __init__(self, vocab_file, do_lower_case=True, preserve_unused_tokens=False):
    self.vocab = load_vocab(vocab_file)
    self.inv_vocab = {v: k for k, v in self.vocab.items()}
    self.do_lower_case = do_lower_case
    self.preserve_unused_tokens = preserve_unused_tokens
    self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case, vocab=self.vocab,
                                          preserve_unused_tokens=preserve_unused_tokens)
    self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
    self._word_cache = {}

  def tokenize(self, text):
    text = _clean_and_space_cjk(convert_to_unicode(text))
    cache = self._word_cache
    output = []
    for word in text.split():
      pieces = cache.get(word)
      if pieces is None:
        pieces = self._tokenize_word(word)
        if len(cache) < _MAX_CACHED_WORDS:
          cache[word] = pieces
      output.extend(pieces)
    return output

  def _tokenize_word(self, word):
    pieces = []
    for token in self.basic_tokenizer.tokenize_word(word):
      if self.preserve_unused_tokens and preserve_token(token, self.vocab):
        pieces.append(token)
      else:
        pieces.extend(self.wordpiece_tokenizer.tokenize_word(token))
    return pieces

  def convert_tokens_to_ids(self, tokens):
    return convert_by_vocab(self.vocab, tokens)

  def convert_ids_to_tokens(self, ids):
    return convert_by_vocab(self.inv_vocab, ids)


@functools.lru_cache(maxsize=None)
def _fallback_characters():
  """Characters where TensorFlow's lower-casing or NFD (its ICU's Unicode) differs from Python's.

  Found by comparing both on every code point (about 2 s): letters added in Unicode 14 (Python
  3.11's version) that TensorFlow's ICU does not lower-case, and code points unassigned in Unicode
  14 that its newer ICU decomposes. FastTokenizer's list API sends text holding one to Python.
  """
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
  codepoints = [cp for cp in range(1, sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]
  chars = [chr(cp) for cp in codepoints]
  lowered = tf.strings.lower(chars, encoding="utf-8").numpy()
  decomposed = tf_text.normalize_utf8(chars, "NFD").numpy()
  unsafe = []
  for cp, char, tf_lower, tf_nfd in zip(codepoints, chars, lowered, decomposed):
    if (char.lower() != tf_lower.decode("utf-8") or
        unicodedata.normalize("NFD", char) != tf_nfd.decode("utf-8")):
      unsafe.append(cp)
  return tuple(unsafe)


class FastTokenizer(tf.Module):
  """FullTokenizer's ids from our normalization in TensorFlow ops + FastWordpieceTokenizer.

  The normalization is the original's, as string ops: invalid UTF-8 dropped, control characters
  dropped, whitespace -> " ", then (do_lower_case) tf.strings.lower (ICU full lower-casing, with
  Greek final sigma as Python's str.lower), NFD and removal of nonspacing marks (Mn), then spaces
  around CJK characters and punctuation and a split on " ". Character classes come from Python's
  unicodedata, so they are the original's exactly. Words over 200 characters become [UNK] as in
  the original (tensorflow-text's own limit is in bytes).

  `ragged_ids` is pure TensorFlow (tf.function / SavedModel). It differs from the original only on
  text with one of the ~60 characters of `_fallback_characters()` (Unicode 14 letters such as
  Vithkuqi, or code points unassigned in Unicode 14); the list API `tokenize_to_ids` / `tokenize`
  detects those texts (and lone surrogates) and tokenizes them with the Python FullTokenizer, so
  its ids always equal the original's.
  """

  def __init__(self, vocab_file, do_lower_case=True, batch_size=4096, name=None):
    super().__init__(name=name)
    import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
    self._python = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    self.do_lower_case = do_lower_case
    self.batch_size = batch_size
    if "[UNK]" not in self.vocab:
      raise BertTfError(f"{vocab_file}: the vocabulary has no [UNK] token")
    max_chars = self._python.wordpiece_tokenizer.max_input_chars_per_word
    self._max_chars_per_word = max_chars
    # Entries the original can never produce (empty after strip(), a bare "##") become unique
    # unmatchable strings (words never hold a space); ids stay the original's.
    pieces = [token if token.strip() and token != "##" else f" unreachable {i}"
              for token, i in self.vocab.items()]
    # The original's limit is in characters: ragged_ids turns longer words into [UNK] itself, so
    # this byte limit (4 bytes a character at most) never binds.
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        pieces, suffix_indicator="##", max_bytes_per_word=4 * max_chars + 4,
        token_out_type=tf.int32, unknown_token="[UNK]", no_pretokenization=True)
    classes = _char_classes()
    self._removed_re = char_class_regex(classes["removed"], re2=True)
    spaces = sorted(set(classes["whitespace"] + classes["other_space"]) - {ord(" ")})
    self._space_re = char_class_regex(spaces, re2=True)
    self._mark_re = char_class_regex(classes["mark"], re2=True)
    punctuation_and_cjk = _ranges(classes["punctuation"]) + list(_CJK_RANGES)
    self._split_re = "(" + char_class_regex(punctuation_and_cjk, re2=True) + ")"
    unsafe = _fallback_characters() if do_lower_case else ()
    surrogates = (0xD800, 0xDFFF)  # lone surrogates cannot be encoded for TensorFlow
    self._fallback_re = re.compile(char_class_regex(_ranges(unsafe) + [surrogates]))

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
      texts = tf.strings.lower(texts, encoding="utf-8")
      texts = tf_text_module().normalize_utf8(texts, "NFD")
      texts = tf.strings.regex_replace(texts, self._mark_re, "")
    return texts

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
    texts = [convert_to_unicode(text) for text in texts]
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

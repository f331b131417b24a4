# coding=utf-8
"""Tokenization: the original BERT BasicTokenizer + WordPiece, and a tensorflow-text path with the same ids.

`FullTokenizer` gives exactly the output of the original release's tokenization.py (bert-tensorflow 1.0.4
with its default `--preserve_unused_tokens=False`); it is faster because it tokenizes each distinct
whitespace-separated word once (a word's pieces do not depend on its neighbours) and uses precomputed
character classes.

`FastTokenizer` runs the same normalization as TensorFlow string ops in front of tensorflow-text's
FastWordpieceTokenizer, so it can live inside a tf.function / SavedModel. tensorflow-text's own
BertTokenizer folds case with NFKC and cuts words at 100 bytes, unlike the original (lower + NFD + accent
strip, 200 characters), so it is not used. See FastTokenizer for the characters where TensorFlow's
lower-casing or NFD differs from Python's and how they are handled.
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
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16", "multi_cased_L-12_H-768_A-12")

# A word cache this big holds every distinct word of a large corpus shard; past it we stop caching.
_MAX_CACHED_WORDS = 2_000_000

# CJK Unified Ideographs blocks, as the original defines a "Chinese character" (not Hangul or kana).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
               (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def validate_case_matches_checkpoint(do_lower_case, init_checkpoint):
  """Raises BertTfError when --do_lower_case contradicts a Google checkpoint's name (cased/uncased)."""
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
      f"--do_lower_case: you passed `--do_lower_case={actual_flag}` with `--init_checkpoint={init_checkpoint}`. "
      f"However, `{model_name}` seems to be a {case_name} model, so you should pass in "
      f"`--do_lower_case={opposite_flag}` so that the fine-tuning matches how the model was pre-trained.")


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
  """Loads a vocabulary file (one token a line) into an OrderedDict token -> id; duplicates keep their first id."""
  if not tf.io.gfile.exists(vocab_file):
    raise BertTfError(f"{vocab_file}: vocabulary file not found")
  with tf.io.gfile.GFile(vocab_file, "rb") as reader:
    content = convert_to_unicode(reader.read())
  lines = content.split("\n")
  if lines and not lines[-1]:
    lines.pop()  # the original reads lines until readline() returns "", i.e. a final newline ends no token
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
  # All non-letter/number ASCII is punctuation ("^", "$", "`" are not Unicode P* but count, for consistency).
  cp = ord(char)
  if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
    return True
  return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
  return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


@functools.lru_cache(maxsize=None)
def _char_classes():
  """Code points of each character class the tokenizer uses, from this Python's unicodedata (as the original)."""
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
  """A regex character class "[...]" matching exactly these code points, for Python `re` or RE2 (TensorFlow)."""
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
  """The original's _clean_text then _tokenize_chinese_chars: drop control chars, whitespace -> " ", " 中 "."""
  patterns = _python_patterns()
  text = text.translate(patterns["clean_table"])
  if not text.isascii():
    text = patterns["cjk"].sub(r" \g<0> ", text)
  return text


class BasicTokenizer(object):
  """Runs basic tokenization (punctuation splitting, lower casing, etc.)."""

  def __init__(self, do_lower_case=True, vocab=tuple(), preserve_unused_tokens=False):
    """`vocab` and `preserve_unused_tokens`: keep words like "[unused3]" that are in vocab whole (the flag of
    bert-tensorflow 1.0.4; off by default, as there)."""
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
    """Tokens of one whitespace-free word of cleaned text: lower-cased, accents stripped, punctuation split."""
    if self.preserve_unused_tokens and preserve_token(word, self.vocab):
      return [word]
    if self.do_lower_case:
      word = word.lower()
      if not word.isascii():
        word = _python_patterns()["mark"].sub("", unicodedata.normalize("NFD", word))
    if word.isalnum():
      return [word]
    # Lower-casing and NFD could in principle make whitespace, so split again as the original does.
    return [token for piece in _python_patterns()["punctuation"].split(word) for token in piece.split()]


def preserve_token(token, vocab):
  """True for a token like "[unused12]" that is in vocab (used only with preserve_unused_tokens)."""
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
    """Tokenizes whitespace-separated words (already passed through BasicTokenizer) into word pieces.

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
  """Characters where TensorFlow's lower-casing or NFD (its ICU's Unicode version) differs from Python's.

  They are found by comparing both on every code point: scripts added in Unicode 14 (Python 3.11's version)
  that TensorFlow's ICU does not lower-case, and code points unassigned in Unicode 14 that newer ICU
  decomposes. Text holding one of them is tokenized by the Python path in FastTokenizer's list API.
  """
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
  codepoints = [cp for cp in range(1, sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]
  chars = [chr(cp) for cp in codepoints]
  lowered = tf.strings.lower(chars, encoding="utf-8").numpy()
  decomposed = tf_text.normalize_utf8(chars, "NFD").numpy()
  unsafe = []
  for cp, char, tf_lower, tf_nfd in zip(codepoints, chars, lowered, decomposed):
    if char.lower() != tf_lower.decode("utf-8") or unicodedata.normalize("NFD", char) != tf_nfd.decode("utf-8"):
      unsafe.append(cp)
  return tuple(unsafe)


class FastTokenizer(tf.Module):
  """FullTokenizer's ids from TensorFlow ops: tensorflow-text's FastWordpieceTokenizer behind our normalization.

  The normalization is the original's, as string ops: drop control characters, whitespace -> " ", then
  (do_lower_case) tf.strings.lower (ICU full lower-casing, with Greek final sigma as Python's str.lower),
  NFD and removal of nonspacing marks (Mn), then spaces around CJK characters and punctuation and a split
  on whitespace. Character classes come from Python's unicodedata, so they are the original's exactly. Words
  over 200 characters become [UNK] as in the original (tensorflow-text's own limit is in bytes).

  `ragged_ids` is pure TensorFlow (tf.function / SavedModel). It differs from the original only on text with
  one of the ~60 characters of `_fallback_characters()` (Unicode 14 scripts such as Vithkuqi, or code points
  unassigned in Python's Unicode 14) and on lone surrogates; the list API `tokenize_to_ids` / `tokenize`
  detects those texts and tokenizes them with the Python FullTokenizer, so its ids always equal the original's.
  """

  def __init__(self, vocab_file, do_lower_case=True, batch_size=4096, name=None):
    super().__init__(name=name)
    import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
    self._python = FullTokenizer(vocab_file, do_lower_case=do_lower_case)
    self.vocab = self._python.vocab
    self.inv_vocab = self._python.inv_vocab
    self.do_lower_case = do_lower_case
    self.batch_size = batch_size
    self.unk_id = self.vocab["[UNK]"] if "[UNK]" in self.vocab else None
    if self.unk_id is None:
      raise BertTfError(f"{vocab_file}: the vocabulary has no [UNK] token")
    max_chars = self._python.wordpiece_tokenizer.max_input_chars_per_word
    self._max_chars_per_word = max_chars
    # Entries the original can never produce (empty after strip(), a bare "##") become unique unmatchable
    # strings: words never contain a space. Ids stay the original's (line order, duplicates skipped).
    pieces = [token if token.strip() and token != "##" else f" unreachable {i}" for token, i in self.vocab.items()]
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        pieces, suffix_indicator="##", max_bytes_per_word=4 * max_chars, token_out_type=tf.int32,
        unknown_token="[UNK]", no_pretokenization=True)
    classes = _char_classes()
    self._removed_re = char_class_regex(classes["removed"], re2=True)
    self._space_re = char_class_regex(sorted(set(classes["whitespace"] + classes["other_space"]) - {32}), re2=True)
    self._mark_re = char_class_regex(classes["mark"], re2=True)
    punctuation_and_cjk = _ranges(classes["punctuation"]) + list(_CJK_RANGES)
    self._split_re = "(" + char_class_regex(punctuation_and_cjk, re2=True) + ")"
    unsafe = _fallback_characters() if do_lower_case else ()
    surrogates = (0xD800, 0xDFFF)  # lone surrogates cannot be encoded for TensorFlow
    self._fallback_re = re.compile(char_class_regex(_ranges(unsafe) + [surrogates]))

  def normalize(self, texts):
    """tf.string [B] -> [B] text cleaned and (do_lower_case) lower-cased with accents stripped."""
    texts = tf.strings.regex_replace(texts, self._removed_re, "")
    texts = tf.strings.regex_replace(texts, self._space_re, " ")
    if self.do_lower_case:
      texts = tf.strings.lower(texts, encoding="utf-8")
      texts = tf_text_module().normalize_utf8(texts, "NFD")
      texts = tf.strings.regex_replace(texts, self._mark_re, "")
    return texts

  def words(self, texts):
    """tf.string [B] -> RaggedTensor [B, (words)]: the BasicTokenizer's output."""
    # The original spaces CJK characters before lower-casing; doing it after, together with punctuation, is
    # the same: no character lower-cases or decomposes into a CJK one (checked on every code point), and
    # CJK characters are neither cased nor case-ignorable, so the Greek final-sigma rule is not affected.
    texts = tf.strings.regex_replace(self.normalize(texts), self._split_re, r" \1 ")
    # After normalize the only whitespace left is " ", and split() splits on ASCII whitespace only.
    return tf.strings.split(texts)

  def ragged_ids(self, texts):
    """tf.string [B] -> int32 RaggedTensor [B, (tokens)] of WordPiece ids; usable in a tf.function/SavedModel."""
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
    """list of str (or bytes) -> list of lists of ids, equal to FullTokenizer's, run in batches."""
    texts = [convert_to_unicode(text) for text in texts]
    output = [None] * len(texts)
    fast_indices, fast_texts = [], []
    for i, text in enumerate(texts):
      if self._fallback_re.search(text):
        output[i] = self._python.convert_tokens_to_ids(self._python.tokenize(text))
      else:
        fast_indices.append(i)
        fast_texts.append(text)
    for start in range(0, len(fast_texts), self.batch_size):
      flat_ids, row_splits = self._batch_ids(tf.constant(fast_texts[start:start + self.batch_size]))
      flat_ids = flat_ids.numpy().tolist()
      row_splits = row_splits.numpy().tolist()
      for j, i in enumerate(fast_indices[start:start + self.batch_size]):
        output[i] = flat_ids[row_splits[j]:row_splits[j + 1]]
    return output

  def tokenize(self, texts):
    """list of str -> list of lists of WordPiece tokens."""
    return [[self.inv_vocab[i] for i in ids] for ids in self.tokenize_to_ids(texts)]


def tf_text_module():
  import tensorflow_text as tf_text  # pylint: disable=g-import-not-at-top
  return tf_text

# coding=utf-8
"""Tokenization: the original BERT BasicTokenizer + WordPiece, in plain Python (no TensorFlow).

`FullTokenizer` gives exactly the output of the original release's tokenization.py
(bert-tensorflow 1.0.4 with its default `--preserve_unused_tokens=False`); it is faster because it
tokenizes each distinct whitespace-separated word once (a word's pieces do not depend on its
neighbours) and uses precomputed character classes. fast_tokenization.py gives the same ids with
TensorFlow ops, for graphs and SavedModels.
"""

import collections
import functools
import re
import sys
import unicodedata

from absl import logging
import numpy as np

from bert_tf.errors import BertTfError
from bert_tf.io import fileio

_UNUSED_TOKEN_RE = re.compile(r"^\[unused\d+\]$")

# Models whose casing is known from their name (the original's list).
_LOWER_MODELS = ("uncased_L-24_H-1024_A-16", "uncased_L-12_H-768_A-12",
                 "multilingual_L-12_H-768_A-12", "chinese_L-12_H-768_A-12")
_CASED_MODELS = ("cased_L-12_H-768_A-12", "cased_L-24_H-1024_A-16",
                 "multi_cased_L-12_H-768_A-12")

# A word cache this big (a few hundred MB at most) holds every distinct word of a large corpus
# shard; past it, words are tokenized each time.
_MAX_CACHED_WORDS = 2_000_000

# CJK Unified Ideographs blocks: the original's "Chinese character" (not Hangul or kana).
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
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
  """Vocabulary file (a token a line, UTF-8, or gzip/bzip2/xz of it) -> OrderedDict token -> id,
  the one reading every script makes of a vocabulary. As the original's load_vocab, each line is a
  token (stripped) whose id is its line's number from 0 (the row of the model's embeddings), and a
  repeated token takes its later line's id; both are named in a warning, with their line numbers.
  Blank lines after the last token are no tokens (an editor's trailing newline; ids are not
  shifted), a blank line before it keeps its id (named in a warning). [UNK], [CLS] and [SEP] must
  be there (check_special_tokens). Text that is not UTF-8 (UTF-16, Latin-1 ...) is a one-line
  error naming the file and the byte, as the original's strict tf.gfile text reader fails on it; a
  UTF-8 byte order mark is dropped (the original kept it in the first token, "\ufeff[PAD]").
  vocab_size(vocab) is the number of ids."""
  if not fileio.exists(vocab_file):
    raise BertTfError(f"{vocab_file}: vocabulary file not found")
  tokens = [line.strip() for line in fileio.read_text(vocab_file).split("\n")]
  while tokens and not tokens[-1]:
    tokens.pop()  # the final newline, and blank lines after the last token
  vocab = collections.OrderedDict()
  blank, repeated = [], []
  for number, token in enumerate(tokens, 1):
    if not token:
      blank.append(number)
    elif token in vocab:
      repeated.append((number, token, vocab[token] + 1))
    vocab[token] = number - 1
  check_special_tokens(vocab, vocab_file)
  _warn_about_lines(vocab_file, blank, repeated)
  return vocab


def vocab_size(vocab):
  """The ids of a load_vocab vocabulary: its lines, repeats and blank lines included."""
  return max(vocab.values(), default=-1) + 1


def tokens_by_id(vocab):
  """The token of each id of a load_vocab vocabulary, in id order; "" for an id no token has (a
  blank line, or the earlier line of a repeated token)."""
  tokens = [""] * vocab_size(vocab)
  for token, index in vocab.items():
    tokens[index] = token
  return tokens


_warned_vocabs = set()


def _warn_about_lines(vocab_file, blank, repeated):
  """One warning a file (however often it is read) about its blank and repeated lines."""
  if (not blank and not repeated) or vocab_file in _warned_vocabs:
    return
  _warned_vocabs.add(vocab_file)
  if blank:
    logging.warning("%s: line %s is blank%s: it keeps its id (%d), which no text gives, so that "
                    "the ids after it stay those of the model's rows", vocab_file, blank[0],
                    f" (and {len(blank) - 1} more)" if len(blank) > 1 else "", blank[0] - 1)
  if repeated:
    number, token, first = repeated[0]
    logging.warning("%s: line %d repeats %r of line %d%s: as the original, the token takes the "
                    "later line's id, %d; the earlier id is never given", vocab_file, number, token,
                    first, f" (and {len(repeated) - 1} more repeats)" if len(repeated) > 1 else "",
                    number - 1)


# What every model input holds: a file without them is not a BERT vocabulary (a corpus or a label
# list given as --vocab_file), and a word the vocabulary cannot spell becomes [UNK].
REQUIRED_TOKENS = ("[CLS]", "[SEP]", "[UNK]")


def check_special_tokens(vocab, vocab_file, tokens=REQUIRED_TOKENS):
  """Raises BertTfError naming the file when the vocabulary lacks one of `tokens`."""
  missing = [token for token in tokens if token not in vocab]
  if missing:
    raise BertTfError(f"{vocab_file}: not a BERT vocabulary: it has no {' or '.join(missing)} "
                      f"({vocab_size(vocab)} lines; expected a token a line with [UNK], [CLS] and "
                      f"[SEP], as a model's vocab.txt)")


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
  return any(lo <= cp <= hi for lo, hi in CJK_RANGES)


# Planes 4-13 (unassigned) and 15-16 (private use): no code point there is in any class below, and
# skipping them makes the tables 4x faster to build (tests check every skipped code point).
CLASSLESS_RANGES = ((0x40000, 0xDFFFF), (0xF0000, sys.maxunicode))


@functools.lru_cache(maxsize=None)
def char_classes():
  """Code points of each character class the tokenizer uses, from unicodedata (as the original).

  Each property is read for all code points at once (str and numpy operations in C): a loop over
  them in Python would be a fixed cost of every process that tokenizes.
  """
  (skip_a, end_a), (skip_b, _) = CLASSLESS_RANGES
  codepoints = np.concatenate([np.arange(skip_a), np.arange(end_a + 1, skip_b)])
  chars = codepoints.astype("<u4").tobytes().decode("utf-32-le", errors="surrogatepass")
  category = np.array(list(map(unicodedata.category, chars)))
  is_space = np.fromiter(map(str.isspace, chars), bool, len(chars))
  removed = ((np.isin(category, ["Cc", "Cf"]) & ~np.isin(codepoints, [9, 10, 13]))
             | np.isin(codepoints, [0, 0xFFFD]))
  whitespace = ~removed & (np.isin(codepoints, [32, 9, 10, 13]) | (category == "Zs"))
  # Kept by the cleaning, yet str.split() splits on it (U+2028, U+2029).
  other_space = ~removed & ~whitespace & is_space
  ascii_punctuation = [cp for cp in range(128) if _is_punctuation(chr(cp))]  # "^", "$", "`" too
  punctuation = (category.astype("U1") == "P") | np.isin(codepoints, ascii_punctuation)
  classes = {"removed": removed, "whitespace": whitespace, "other_space": other_space,
             "punctuation": punctuation, "mark": category == "Mn"}
  return {name: tuple(codepoints[mask].tolist()) for name, mask in classes.items()}


def codepoint_runs(codepoints):
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
  runs = items if items and isinstance(items[0], tuple) else codepoint_runs(items)
  fmt = (lambda cp: "\\x{%x}" % cp) if re2 else (lambda cp: "\\U%08x" % cp)
  parts = [fmt(lo) if lo == hi else f"{fmt(lo)}-{fmt(hi)}" for lo, hi in runs]
  return "[" + "".join(parts) + "]"


@functools.lru_cache(maxsize=None)
def _python_patterns():
  classes = char_classes()
  clean_table = {cp: None for cp in classes["removed"]}
  clean_table.update({cp: " " for cp in classes["whitespace"]})
  return {
      "clean_table": clean_table,
      "cjk": re.compile(char_class_regex(CJK_RANGES)),
      "punctuation": re.compile("(" + char_class_regex(classes["punctuation"]) + ")"),
      "mark": re.compile(char_class_regex(classes["mark"])),
  }


def _clean_and_space_cjk(text):
  """The original's _clean_text and _tokenize_chinese_chars: no control chars, " ", " 中 "."""
  patterns = _python_patterns()
  # Every character the table changes is non-printable to Python, or U+FFFD: most lines need no
  # translate, which costs more than the whole word-cache lookup of a line.
  if not text.isprintable() or "\ufffd" in text:
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
    self.vocab_file = vocab_file
    # The one word cache: a word of cleaned text -> (its pieces, their ids, or None when a piece is
    # not in the vocab, as [UNK] is not in a vocab without it).
    self._word_cache = {}

  def tokenize(self, text):
    cache = self._word_cache
    output = []
    for word in _clean_and_space_cjk(convert_to_unicode(text)).split():
      output.extend((cache.get(word) or self._cache_word(word))[0])
    return output

  def tokenize_to_ids(self, text):
    """convert_tokens_to_ids(tokenize(text)), from the same word cache (what create_pretraining_data's
    reading loop needs)."""
    cache = self._word_cache
    output = []
    try:
      for word in _clean_and_space_cjk(convert_to_unicode(text)).split():
        output.extend((cache.get(word) or self._cache_word(word))[1])
    except TypeError:  # the ids of a word were None
      missing = next(piece for piece in self.tokenize(text) if piece not in self.vocab)
      raise BertTfError(f"{self.vocab_file}: the tokenizer produced {missing!r}, which is not in "
                        f"the vocab (a vocab needs [UNK] for words it cannot spell)") from None
    return output

  def _cache_word(self, word):
    pieces = tuple(self._tokenize_word(word))
    vocab = self.vocab
    ids = tuple(vocab[piece] for piece in pieces) if all(p in vocab for p in pieces) else None
    entry = (pieces, ids)
    if len(self._word_cache) < _MAX_CACHED_WORDS:
      self._word_cache[word] = entry
    return entry

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

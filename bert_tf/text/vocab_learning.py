"""Learning a WordPiece vocabulary from raw text (create_vocab.py).

1. Words are counted as the original's BasicTokenizer splits them (cleaning, CJK spacing, optional
   lower-casing and accent stripping, punctuation split), so FullTokenizer and
   create_pretraining_data meet exactly the words the pieces were learned from. The corpus is
   streamed in blocks of lines; the word-count dict is bounded: when it holds more than
   `max_words_in_memory` words, the rarest are dropped until half remain (WordCounter).
2. A vocabulary somewhat larger than asked (OVERSIZE) is learned from the counts, by one of:
   - "bpe" (default): byte-pair-encoding merges with "##" continuation pieces, the algorithm of
     Hugging Face tokenizers' WordPieceTrainer (the alphabet, then the most frequent adjacent
     pair of pieces merged into a new piece, again and again; ties broken by the pieces' text);
   - "tensorflow_text": tensorflow-text's WordPiece learner (the algorithm of the original's
     vocabularies: pieces whose count passes a threshold, recounted over 4 passes of greedy
     segmentation), at the largest threshold that gives the size.
   bench/bench_vocab.py measures both on Gutenberg books against HF tokenizers
   (BENCHMARKS.md#vocab): "bpe" is the default, as it gives fewer pieces per word, sooner.
3. That vocabulary is cut to size by usage: the training words are segmented greedily, longest
   match first (as WordpieceTokenizer does), and the pieces used least are dropped, in rounds,
   until `num_pieces` remain. Every character of the alphabet stays, bare and with "##", so a word
   made of known characters never becomes [UNK]. This cut is what makes the result use fewer
   pieces per word on held-out text than HF's vocabulary of the same size.

Layout of the file (the original's): [PAD], [unused0] .. [unused98], [UNK], [CLS], [SEP], [MASK],
then the remaining [unused99] .. [unusedN-1] for `num_unused` = N, then the reserved tokens, then
the learned pieces (single characters first). With N = 994 the first 999 lines are those of the
original uncased vocabulary; with N < 99, [UNK] comes right after the last [unused].
"""
import collections
import dataclasses
import heapq
import math
import os
import time
from typing import Optional

from absl import logging

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io import progress
from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import check_fields
from bert_tf.options import option
from bert_tf.text import tokenization

# The [unused*] slots before [UNK]: 99 in the original, which puts [UNK] [CLS] [SEP] [MASK] at
# ids 100-103.
UNUSED_BEFORE_UNK = 99
SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
LEARNERS = ("bpe", "tensorflow_text")
# The learner's vocabulary is this many times the size asked before it is cut by usage: chosen on
# bench_vocab.py's books (bpe: 1.15 and 1.3 did best of 1, 1.15, 1.3, 1.5; tensorflow_text: 2 and
# 3.5 about equal, better than 1.1).
OVERSIZE = {"bpe": 1.2, "tensorflow_text": 2}
# The learners see at most this many words, the most frequent (bounds their memory and time).
MAX_LEARNER_WORDS = 1_000_000
# Words longer than this (in characters) are not learned from (tensorflow-text's default).
MAX_TOKEN_LENGTH = 50
JOINER = "##"


def special_tokens(num_unused, reserved_tokens=()):
  """The lines before the learned pieces (module docstring)."""
  first = min(num_unused, UNUSED_BEFORE_UNK)
  return (["[PAD]"] + [f"[unused{i}]" for i in range(first)] + list(SPECIAL_TOKENS) +
          [f"[unused{i}]" for i in range(first, num_unused)] + list(reserved_tokens))


@dataclasses.dataclass(frozen=True)
class VocabOptions:
  """create_vocab.py's flags, checked as they are built: one-line errors for values outside their
  range and unusable reserved tokens."""
  input_file: Optional[str] = option(None, "Raw text to learn from: comma-separated files or "
                                     "globs (local or gs://...), any line layout.")
  output_file: Optional[str] = option(None, "Where to write the vocabulary, one token a line.",
                                      OUTPUT)
  overwrite: bool = option(False, "Replace --output_file if it exists (otherwise an existing "
                           "file is an error, checked before any work).", OUTPUT)
  vocab_size: int = option(30522, "Lines of the vocabulary, special, unused and reserved tokens "
                           "included (fewer if the corpus cannot fill them).", at_least=1)
  do_lower_case: bool = option(True, "Whether to lower case the input text (and strip accents). "
                               "Should be True for uncased models and False for cased models.",
                               MODEL)
  min_count: int = option(1, "Learn only from words seen at least this many times.", at_least=1)
  reserved_tokens: tuple = option(
      (), "Comma-separated tokens to put in the vocabulary after the [unused*] slots, never "
      "learned over (e.g. markers for fine-tuning). BasicTokenizer splits punctuation, so a token "
      "such as [E1] is never produced from text: use it by id.", kind="list")
  num_unused: int = option(
      UNUSED_BEFORE_UNK, "[unused*] slots: the first 99 before [UNK] (ids 1-99, [UNK] [CLS] "
      "[SEP] [MASK] at 100-103, as the original), the rest right after [MASK]. The original "
      "uncased vocabulary has 994.", at_least=0)
  max_unique_chars: int = option(
      1000, "Alphabet size: words with a character outside the most frequent ones are not "
      "learned from (those characters become [UNK]). Raise it for Chinese or Japanese text.",
      at_least=1)
  max_words_in_memory: int = option(
      5_000_000, "Bound of the word-count dict: past it the rarest words are dropped until half "
      "remain (memory grows with it).", at_least=2)
  learner: str = option(
      "bpe", "bpe: byte-pair merges as Hugging Face tokenizers' WordPieceTrainer; "
      "tensorflow_text: tensorflow-text's WordPiece learner. Either is then cut to size by usage "
      "(bert_tf/text/vocab_learning.py; bpe gives fewer pieces per word).", choices=LEARNERS)
  progress_seconds: Optional[float] = option(30, "Log progress this often.", OUTPUT,
                                             kind="integer")

  def __post_init__(self):
    object.__setattr__(self, "reserved_tokens", tuple(self.reserved_tokens))
    check_fields(self)
    fixed = set(special_tokens(self.num_unused))
    seen = set()
    for token in self.reserved_tokens:
      if not token or token != token.strip() or len(token.split()) != 1:
        raise BertTfError(f"--reserved_tokens: {token!r} is empty or holds whitespace")
      if token in fixed or token in seen:
        raise BertTfError(f"--reserved_tokens: {token!r} is already in the vocabulary's layout")
      seen.add(token)
    num_fixed = len(special_tokens(self.num_unused, self.reserved_tokens))
    if self.vocab_size <= num_fixed:
      raise BertTfError(f"--vocab_size: {self.vocab_size} leaves no room for pieces after "
                        f"{num_fixed} special, unused and reserved tokens")


class WordCounter:
  """Counts of BasicTokenizer's words in at most `max_words` entries (plus one block's worth).

  Past `max_words` distinct words, the words of the lowest counts are dropped until at most half
  remain; a dropped word seen again counts from 0, so a count can be short by at most
  `undercount` (the sum of the counts dropped at), and only for words that were rare then.
  """

  def __init__(self, do_lower_case, max_words):
    self.basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
    self.max_words = max_words
    self.counts = collections.Counter()
    self.undercount = 0
    self.prunings = 0
    self.total = 0

  def add_text(self, text):
    # pylint: disable=protected-access
    raw = collections.Counter(tokenization._clean_and_space_cjk(text).split())
    counts, tokenize_word = self.counts, self.basic.tokenize_word
    for word, count in raw.items():
      for token in tokenize_word(word):
        counts[token] += count
        self.total += count
    if len(counts) > self.max_words:
      self._prune()

  def _prune(self):
    histogram = collections.Counter(self.counts.values())
    keep, floor = len(self.counts), 0
    for count in sorted(histogram):
      if keep <= self.max_words // 2:
        break
      keep -= histogram[count]
      floor = count
    self.counts = collections.Counter({w: c for w, c in self.counts.items() if c > floor})
    self.undercount += floor
    self.prunings += 1
    logging.info("word counts: dropped the words seen at most %d times; %d remain", floor,
                 len(self.counts))


def count_words(input_files, do_lower_case, max_words, progress_seconds=30):
  """WordCounter over the files, read as create_pretraining_data reads them (invalid UTF-8
  dropped, counted in `invalid_utf8_lines`)."""
  counter = WordCounter(do_lower_case, max_words)
  counter.invalid_utf8_lines = 0
  num_bytes = 0
  bar = progress.Progress("counting words", seconds=progress_seconds)
  for path in input_files:
    for chunk in fileio.line_chunks(path):
      text, bad_lines = fileio.decode_lines(chunk)
      counter.invalid_utf8_lines += bad_lines
      counter.add_text(text)
      num_bytes += len(chunk)
      bar.maybe_log(lambda s, n=num_bytes: f"{n / 1e6:.1f} MB, {counter.total:,} words, "
                    f"{len(counter.counts):,} distinct, {n / 1e6 / max(s, 1e-9):.2f} MB/s")
  bar.close()
  counter.num_bytes = num_bytes
  return counter


def _tensorflow_text_learner():
  """tensorflow-text's learner, imported only when used: it imports TensorFlow (seconds)."""
  # pylint: disable=g-import-not-at-top
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib
  return wordpiece_tokenizer_learner_lib


def learner_input(word_counts, min_count, max_unique_chars, excluded=()):
  """(word, count) pairs the learners take, filtered as tensorflow-text's learner filters them:
  count >= min_count, not excluded, at most MAX_TOKEN_LENGTH characters, made of the
  `max_unique_chars` most frequent characters only; the MAX_LEARNER_WORDS most frequent, sorted
  by count then word (so ties never depend on reading order)."""
  excluded = set(excluded)
  pairs = sorted(((w, c) for w, c in word_counts.items()
                  if c >= min_count and w not in excluded and len(w) <= MAX_TOKEN_LENGTH),
                 key=lambda pair: (-pair[1], pair[0]))
  char_counts = collections.Counter()
  for word, count in pairs:
    for char in word:
      char_counts[char] += count
  ranked = sorted(char_counts.items(), key=lambda item: (-item[1], item[0]))
  allowed = {char for char, _ in ranked[:max_unique_chars]}
  if len(allowed) < len(char_counts):
    pairs = [(word, count) for word, count in pairs if allowed.issuperset(word)]
  return pairs[:MAX_LEARNER_WORDS]


def is_character(piece):
  return len(piece) == 1 or (piece.startswith(JOINER) and len(piece) == len(JOINER) + 1)


def learn_with_tensorflow_text(words, goal, progress_seconds=30):
  """tensorflow-text's vocabulary at the largest count threshold that gives at least `goal`
  pieces (or at threshold 1, the largest it gives); returns (pieces, threshold). The threshold
  is found by bisection in log space, stopping early on a vocabulary of goal to 1.5 x goal."""
  lib = _tensorflow_text_learner()
  params = lib.Params(upper_thresh=None, lower_thresh=None, num_iterations=4,
                      max_input_tokens=-1, max_token_length=MAX_TOKEN_LENGTH,
                      max_unique_chars=None, vocab_size=goal, slack_ratio=0,
                      include_joiner_token=True, joiner=JOINER, reserved_tokens=[])
  bar = progress.Progress("learning", unit="thresholds tried", seconds=progress_seconds)
  learned = {}

  def size_at(threshold):
    if threshold not in learned:
      learned[threshold] = lib.learn_with_thresh(words, threshold, params)
      bar.update(len(learned), f"threshold {threshold}: {len(learned[threshold]):,} pieces")
    return len(learned[threshold])

  low, high = 1, max(count for _, count in words) + 1  # size_at(high) is the alphabet's
  while high - low > 1:
    middle = min(max(round(math.sqrt(low * high)), low + 1), high - 1)
    size = size_at(middle)
    if size >= goal:
      low = middle
      if size <= 1.5 * goal:
        break
    else:
      high = middle
  size_at(low)
  bar.close()
  return learned[low], low


def _pairs(word):
  return zip(word, word[1:])


def learn_by_merges(words, goal, progress_seconds=30):
  """Byte-pair-encoding merges over (word, count) pairs, with "##" continuation pieces (module
  docstring): the alphabet (sorted), then each new piece in the order merged, `goal` in all (or
  fewer, when no pair is left)."""
  # Every character bare and with ## (as the original's vocabularies and tensorflow-text's); the
  # words' symbols share these strings.
  characters = {char for word, _ in words for char in word}
  bare = {char: char for char in characters}
  joined = {char: JOINER + char for char in characters}
  symbols = [[bare[word[0]]] + [joined[char] for char in word[1:]] for word, _ in words]
  counts = [count for _, count in words]
  pieces = sorted([*bare.values(), *joined.values()])
  known = set(pieces)
  pair_counts = collections.Counter()
  where = collections.defaultdict(set)  # pair -> indices of words that held it (some may not now)
  for i, word in enumerate(symbols):
    for pair in _pairs(word):
      pair_counts[pair] += counts[i]
      where[pair].add(i)
  heap = [(-count, pair) for pair, count in pair_counts.items()]
  heapq.heapify(heap)
  bar = progress.Progress("learning", total=goal, unit="pieces", seconds=progress_seconds)
  while len(pieces) < goal and heap:
    negative_count, pair = heapq.heappop(heap)
    if pair_counts.get(pair, 0) != -negative_count:
      continue  # a stale entry: the pair's count changed since it was pushed
    merged = pair[0] + pair[1][len(JOINER):]
    changed = set()
    for i in where.pop(pair):
      _merge_in_word(symbols, i, pair, merged, counts[i], pair_counts, where, changed)
    del pair_counts[pair]
    changed.discard(pair)
    for other in changed:
      if pair_counts[other] > 0:
        heapq.heappush(heap, (-pair_counts[other], other))
      else:
        del pair_counts[other]
    if merged not in known:
      known.add(merged)
      pieces.append(merged)
      bar.update(len(pieces))
  bar.close()
  return pieces


def _merge_in_word(symbols, i, pair, merged, count, pair_counts, where, changed):
  """Replaces each `pair` in word i (if it still holds one) by `merged`, moving the word's pair
  counts."""
  word = symbols[i]
  old = list(_pairs(word))
  if pair not in old:
    return
  new, j = [], 0
  while j < len(word):
    if j + 1 < len(word) and (word[j], word[j + 1]) == pair:
      new.append(merged)
      j += 2
    else:
      new.append(word[j])
      j += 1
  symbols[i] = new
  for other in old:
    pair_counts[other] -= count
    changed.add(other)
  for other in _pairs(new):
    pair_counts[other] += count
    where[other].add(i)
    changed.add(other)


def prune_by_usage(pieces, num_pieces, words):
  """The `num_pieces` pieces that greedy longest-match segmentation of `words` uses most, in the
  order of `pieces`; single characters (bare and with ##) always stay (module docstring)."""
  vocab = set(pieces)
  while len(vocab) > num_pieces:
    segmenter = tokenization.WordpieceTokenizer(vocab, max_input_chars_per_word=MAX_TOKEN_LENGTH)
    usage = dict.fromkeys(vocab, 0)
    for word, count in words:
      for piece in segmenter.tokenize_word(word):
        if piece in usage:  # not "[UNK]" for a word whose character is a reserved token
          usage[piece] += count
    candidates = sorted((used, piece) for piece, used in usage.items() if not is_character(piece))
    excess = len(vocab) - num_pieces
    unused = [piece for used, piece in candidates if used == 0]
    drop = unused[:excess] if unused else [piece for _, piece in candidates[:max(1, excess // 2)]]
    vocab.difference_update(drop)
  return [piece for piece in pieces if piece in vocab]


def learn_vocabulary(word_counts, num_pieces, min_count=1, max_unique_chars=1000, excluded=(),
                     learner="bpe", progress_seconds=30):
  """Learned pieces (at most `num_pieces`, fewer when the corpus has no more) and a dict of
  figures for the summary."""
  words = learner_input(word_counts, min_count, max_unique_chars, excluded)
  if not words:
    raise BertTfError(f"--input_file: no word is seen at least --min_count={min_count} times")
  goal = round(OVERSIZE[learner] * num_pieces)
  if learner == "tensorflow_text":
    pieces, threshold = learn_with_tensorflow_text(words, goal, progress_seconds)
  else:
    pieces, threshold = learn_by_merges(words, goal, progress_seconds), None
  excluded = set(excluded)
  pieces = [piece for piece in pieces if piece not in excluded]
  alphabet = sum(is_character(piece) for piece in pieces)
  if alphabet > num_pieces:
    raise BertTfError(f"--vocab_size: too small for the corpus's {alphabet} characters (bare and "
                      f"with ##); raise it or lower --max_unique_chars")
  learned = len(pieces)
  pieces = prune_by_usage(pieces, num_pieces, words)
  figures = {"words learned from": len(words), "learner threshold": threshold,
             "learner's pieces": learned, "alphabet (with ##)": alphabet}
  return pieces, figures


def refuse_existing(path, overwrite):
  fileio.check_output_file(path, "--output_file")
  if fileio.exists(path) and not overwrite:
    raise BertTfError(f"--output_file: {path} exists; choose another path or pass --overwrite")


def write_vocabulary(path, tokens, overwrite):
  """Writes one token a line, atomically; an existing file is replaced only with `overwrite`."""
  refuse_existing(path, overwrite)
  if not fileio.is_url(path) and os.path.dirname(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
  fileio.write_text_atomically(path, "".join(token + "\n" for token in tokens))


def run(options):
  """create_vocab.py: count words, learn, write (module docstring); options: a VocabOptions."""
  fileio.check_not_input(options.output_file, [("--input_file", options.input_file)],
                         "--output_file")
  refuse_existing(options.output_file, options.overwrite)  # before hours of work, and after
  fileio.remove_stale_temporaries(options.output_file)
  input_files = fileio.input_files(options.input_file)
  fixed = special_tokens(options.num_unused, options.reserved_tokens)
  start = time.monotonic()
  counter = count_words(input_files, options.do_lower_case, options.max_words_in_memory,
                        options.progress_seconds)
  count_seconds = time.monotonic() - start
  if not counter.total:
    raise BertTfError(f"--input_file: no word in {', '.join(input_files)} (expected text; the "
                      f"files are empty or blank)")
  if counter.invalid_utf8_lines:
    logging.warning("%d lines held invalid UTF-8: those bytes were dropped (as the original "
                    "create_pretraining_data drops them)", counter.invalid_utf8_lines)
  num_pieces = options.vocab_size - len(fixed)
  pieces, figures = learn_vocabulary(counter.counts, num_pieces, options.min_count,
                                     options.max_unique_chars, fixed, options.learner,
                                     options.progress_seconds)
  learn_seconds = time.monotonic() - start - count_seconds
  if len(pieces) < num_pieces:
    logging.warning("the corpus gives only %d pieces: the vocabulary has %d tokens, not "
                    "--vocab_size=%d (set the model's vocab_size to it or above)", len(pieces),
                    len(fixed) + len(pieces), options.vocab_size)
  write_vocabulary(options.output_file, fixed + pieces, options.overwrite)
  progress.summary("Finished", [("vocabulary", options.output_file)], {
      "vocabulary size": len(fixed) + len(pieces), "special, unused and reserved": len(fixed),
      "learned pieces": len(pieces), "input MB": round(counter.num_bytes / 1e6, 1),
      "words counted": counter.total, "distinct words": len(counter.counts), **figures,
      "word-count prunings": counter.prunings or None,
      "largest undercount of a word": counter.undercount or None,
      "counting": progress.format_duration(count_seconds),
      "learning": progress.format_duration(learn_seconds)})

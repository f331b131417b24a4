"""Pretraining instances: the original create_pretraining_data.py's records, record for record, at corpus scale.

The original draws every choice from one `random.Random(random_seed)` in a fixed pattern, so the same
flags give the same records in the same order. We keep that pattern call for call (which is why the
choosing stays in one process), but everything around it is done differently:

* Reading and tokenizing run in `num_workers` processes over chunks of lines, in order.
* The corpus is held as token ids in one numpy array with sentence offsets, not lists of strings.
* An instance is kept as four offsets into that array plus its masked positions and replacements; the
  token ids are only put together when the record is serialized. With more than one worker, the
  others serialize each block of instances while the next ones are made (see Spool).
* A shuffle consumes the random stream exactly as `random.Random.shuffle` does, without its
  per-element Python call overhead.
* TensorFlow is not imported (it takes seconds to load): files are read and written with Python's
  I/O (tf.io.gfile only for gs:// and other URLs) and records are framed by records.tfrecord_bytes.

Memory is about 2 bytes a token (4 for vocabs over 65,536 ids) plus 48 bytes an instance and 6 bytes
a masked token (~170 bytes an instance at 20 predictions), where the original holds every document and
every instance as Python lists of strings. All instances are held until the final shuffle, as in the
original; to bound memory on a very large corpus, split it into shards (run_shards).
"""
import bisect
import collections
import concurrent.futures
import contextlib
import dataclasses
import hashlib
import mmap
import multiprocessing
import os
import random
import re
import shutil
import signal
import tempfile
import time
from array import array

import numpy as np
from absl import logging

from bert_tf import fileio
from bert_tf import records
from bert_tf.errors import BertTfError

# Characters that str.split() treats as whitespace but the original tokenizer deletes as control
# characters (so the text around them joins up). A line holding one is tokenized whole.
_JOINING_CONTROLS = re.compile("[\x0b\x0c\x1c\x1d\x1e\x1f\x85]")

# Read input files in blocks of about this size; one block of whole lines is one unit of parallel work.
_CHUNK_BYTES = 1 << 20
# Distinct words whose ids are cached (a few hundred MB at most); past it, words are tokenized each time.
_MAX_CACHED_WORDS = 2_000_000
# Instances per unit of parallel serialization.
_WRITE_BLOCK = 5000

# random.Random.shuffle/randint draw through _randbelow_with_getrandbits; _shuffle and _randint below
# draw the same bits without the Python call overhead. On an interpreter where that is not the case,
# fall back to the Random methods themselves.
_FAST_RANDOM = random.Random._randbelow is random.Random._randbelow_with_getrandbits


@dataclasses.dataclass
class Options:
  """How instances are made: the original's flags plus the masking and NSP ablations."""
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  random_seed: int = 12345
  dupe_factor: int = 10
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  do_whole_word_mask: bool = False
  # The paper's Table 8 ablation: what a chosen token becomes ([MASK] / itself / a random token).
  mask_prob_mask: float = 0.8
  mask_prob_keep: float = 0.1
  mask_prob_random: float = 0.1
  # The "No NSP" ablation: one segment per instance, next_sentence_labels always 0.
  no_nsp: bool = False

  def validate(self):
    def check(ok, flag, message):
      if not ok:
        raise BertTfError(f"--{flag}: {message}")
    check(5 <= self.max_seq_length <= 65535, "max_seq_length",
          f"must be in [5, 65535] ([CLS] A [SEP] B [SEP] with one token each side), got {self.max_seq_length}")
    check(self.max_predictions_per_seq >= 1, "max_predictions_per_seq",
          f"must be at least 1, got {self.max_predictions_per_seq}")
    check(self.dupe_factor >= 1, "dupe_factor", f"must be at least 1, got {self.dupe_factor}")
    check(0.0 <= self.masked_lm_prob <= 1.0, "masked_lm_prob", f"must be in [0, 1], got {self.masked_lm_prob}")
    check(0.0 <= self.short_seq_prob <= 1.0, "short_seq_prob", f"must be in [0, 1], got {self.short_seq_prob}")
    probs = (self.mask_prob_mask, self.mask_prob_keep, self.mask_prob_random)
    check(all(0.0 <= p <= 1.0 for p in probs) and abs(sum(probs) - 1.0) < 1e-6,
          "mask_prob_mask/--mask_prob_keep/--mask_prob_random",
          f"must each be in [0, 1] and sum to 1, got "
          f"{probs[0]:g} + {probs[1]:g} + {probs[2]:g} = {sum(probs):g}")


class Progress:
  """An absl log line every `seconds` seconds during a long phase."""

  def __init__(self, phase, seconds):
    self.phase = phase
    self.seconds = seconds
    self.start = self.last = time.time()

  def maybe_log(self, message_fn):
    now = time.time()
    if self.seconds is not None and now - self.last >= self.seconds:
      self.last = now
      logging.info("%s: %s (%.0f s)", self.phase, message_fn(now - self.start), now - self.start)


# ----------------------------------------------------------------------------------------------------
# Reading and tokenizing.

_line_tokenizer_for_workers = None  # set before the pool forks, so workers inherit it


def _line_chunks(path):
  """Blocks of whole lines of a file, as bytes (the last may lack a final newline)."""
  with fileio.open_file(path, "rb") as reader:
    rest = b""
    while True:
      block = reader.read(_CHUNK_BYTES)
      if not block:
        break
      block = rest + block
      cut = block.rfind(b"\n") + 1
      if cut == 0:  # no newline yet: a line longer than a block
        rest = block
        continue
      rest = block[cut:]
      yield block[:cut]
    if rest:
      yield rest


def _decode(chunk):
  """Text of a chunk, and how many of its lines had invalid UTF-8 (dropped bytes, as the original).
  Every "\r" is dropped, as the original's tf.gfile line reader drops them."""
  if b"\r" in chunk:
    chunk = chunk.replace(b"\r", b"")
  try:
    return chunk.decode("utf-8"), 0
  except UnicodeDecodeError:
    lines = chunk.split(b"\n")
    bad = 0
    for i, line in enumerate(lines):
      try:
        lines[i] = line.decode("utf-8")
      except UnicodeDecodeError:
        lines[i] = line.decode("utf-8", "ignore")
        bad += 1
    return "\n".join(lines), bad


class LineTokenizer:
  """The original's reading loop on a block of lines, giving token ids, with a cache of each word's ids."""

  def __init__(self, tokenizer):
    self.tokenizer = tokenizer
    self.vocab = tokenizer.vocab
    self.word_ids = {}

  def tokenize_chunk(self, chunk):
    """Returns (ids, events, bad_lines, num_bytes): `events` holds, per line in order, the number of
    tokens of a line that has any, and -1 for a blank line (which starts a new document)."""
    text, bad_lines = _decode(chunk)
    lines = text.split("\n")
    if lines and not lines[-1]:
      lines.pop()  # the newline ending the chunk's last line
    ids = array("i")
    events = array("i")
    for line in lines:
      line = line.strip()
      if not line:
        events.append(-1)
        continue
      line_ids = self._ids(line) if _JOINING_CONTROLS.search(line) else self._line_ids(line)
      if line_ids:
        ids.extend(line_ids)
        events.append(len(line_ids))
    return (np.frombuffer(ids, dtype=np.int32), np.frombuffer(events, dtype=np.int32), bad_lines,
            len(chunk))

  def _line_ids(self, line):
    # A word's tokens do not depend on its neighbours, so each distinct word is tokenized once.
    cache = self.word_ids
    line_ids = []
    for word in line.split():
      word_ids = cache.get(word)
      if word_ids is None:
        word_ids = self._ids(word)
        if len(cache) < _MAX_CACHED_WORDS:
          cache[word] = word_ids
      line_ids.extend(word_ids)
    return line_ids

  def _ids(self, text):
    try:
      return tuple(self.vocab[token] for token in self.tokenizer.tokenize(text))
    except KeyError as e:
      raise BertTfError(f"--vocab_file: the tokenizer produced {e.args[0]!r}, which is not in the vocab "
                        f"(a vocab needs [UNK] for words it cannot spell)") from None


def _tokenize_chunk_in_worker(chunk):
  return _line_tokenizer_for_workers.tokenize_chunk(chunk)


class Corpus:
  """Every document's sentences as token ids: the original's `all_documents`, before its shuffle.

  tokens: all token ids, sentence after sentence. sentence_starts[s] .. sentence_starts[s + 1]: the
  tokens of sentence s. document_starts[d] .. document_starts[d + 1]: the sentences of document d.
  """

  def __init__(self, tokens, sentence_starts, document_starts, stats):
    self.tokens = tokens
    self.sentence_starts = sentence_starts
    self.document_starts = document_starts
    self.stats = stats

  @property
  def num_documents(self):
    return len(self.document_starts) - 1


def read_corpus(input_files, tokenizer, num_workers=1, progress_seconds=30):
  """Reads one-sentence-per-line files (blank lines between documents) into a Corpus of token ids."""
  global _line_tokenizer_for_workers
  id_dtype = np.uint16 if len(tokenizer.vocab) <= (1 << 16) else np.int32
  id_parts, event_parts = [], []
  stats = collections.Counter()
  progress = Progress("reading", progress_seconds)

  def chunks():
    for path in input_files:
      if not fileio.exists(path):
        raise BertTfError(f"--input_file: {path} does not exist")
      yield from _line_chunks(path)

  def take(result):
    ids, events, bad_lines, num_bytes = result
    id_parts.append(ids.astype(id_dtype))
    event_parts.append(events)
    stats["bytes"] += num_bytes
    stats["invalid_utf8_lines"] += bad_lines
    stats["tokens"] += len(ids)
    stats["blank_lines"] += int(np.sum(events < 0))
    progress.maybe_log(lambda s: f"{stats['bytes'] / 1e6:.1f} MB, {stats['blank_lines']} blank lines, "
                       f"{stats['tokens']} tokens, {stats['bytes'] / 1e6 / max(s, 1e-9):.2f} MB/s")

  line_tokenizer = LineTokenizer(tokenizer)
  # The tokenizer builds its character tables on first use (~2 s): once here, not once per worker.
  tokenizer.tokenize("warm-up")
  if num_workers > 1:
    _line_tokenizer_for_workers = line_tokenizer
    try:
      with contextlib.closing(_in_order_in_workers(_tokenize_chunk_in_worker, chunks(), num_workers,
                                                   "tokenizing the input")) as results:
        for result in results:
          take(result)
    finally:
      _line_tokenizer_for_workers = None
  else:
    for chunk in chunks():
      take(line_tokenizer.tokenize_chunk(chunk))

  tokens = np.concatenate(id_parts) if id_parts else np.zeros([0], id_dtype)
  events = np.concatenate(event_parts) if event_parts else np.zeros([0], np.int32)
  is_break = events < 0
  lengths = events[~is_break]
  sentence_starts = np.zeros([len(lengths) + 1], np.int64)
  np.cumsum(lengths, out=sentence_starts[1:])
  # A blank line starts a new document at the number of sentences read so far; empty ones are dropped.
  sentences_before = np.cumsum(~is_break)[is_break]
  bounds = np.concatenate([[0], sentences_before, [len(lengths)]]).astype(np.int64)
  starts, ends = bounds[:-1], bounds[1:]
  keep = ends > starts
  document_starts = np.concatenate([starts[keep], ends[keep][-1:]]) if keep.any() else np.zeros([1], np.int64)
  stats["sentences"] = len(lengths)
  stats["documents"] = len(document_starts) - 1
  if stats["invalid_utf8_lines"]:
    logging.warning("%d input lines had invalid UTF-8; their bad bytes were dropped (as the original's "
                    "convert_to_unicode does)",
                    stats["invalid_utf8_lines"])
  return Corpus(tokens, sentence_starts, document_starts, stats)


def _forked_workers(num_workers):
  """Worker processes that inherit the module's state (tokenizer, tokens) without pickling it; they
  fork at the first submit. Unlike multiprocessing.Pool, which waits forever for the task of a worker
  that was killed (e.g. out of memory), the executor fails that worker's tasks (see _if_a_worker_dies).
  Each worker ends with the process that forked it, however that one ends (_die_with_parent)."""
  return concurrent.futures.ProcessPoolExecutor(
      num_workers, mp_context=multiprocessing.get_context("fork"), initializer=_die_with_parent,
      initargs=(os.getpid(),))


def _die_with_parent(parent_pid):
  """In a worker: asks Linux for SIGKILL when the parent dies (PR_SET_PDEATHSIG), so a killed run
  leaves no worker behind; SIGTERM and SIGINT are the parent's to handle."""
  signal.signal(signal.SIGTERM, signal.SIG_DFL)
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
  except (OSError, AttributeError):
    pass  # not Linux: workers still end when their queue closes
  if os.getppid() != parent_pid:  # the parent died before prctl took effect
    os._exit(1)  # pylint: disable=protected-access


@contextlib.contextmanager
def _if_a_worker_dies(doing):
  try:
    yield
  except concurrent.futures.process.BrokenProcessPool as e:
    raise RuntimeError(f"a worker process {doing} died (killed, or out of memory?); nothing was "
                       f"written") from e


def _in_order_in_workers(function, items, num_workers, doing):
  """function(item) for each item, in order, computed by forked workers, with at most 2 items a
  worker in flight so that memory stays bounded."""
  workers = _forked_workers(num_workers)
  in_flight = collections.deque()
  try:
    with _if_a_worker_dies(doing):
      for item in items:
        in_flight.append(workers.submit(function, item))
        if len(in_flight) >= 2 * num_workers:
          yield in_flight.popleft().result()
      while in_flight:
        yield in_flight.popleft().result()
  finally:
    workers.shutdown(wait=True, cancel_futures=True)


# ----------------------------------------------------------------------------------------------------
# Choosing instances: one random stream, in the original's order.


def _shuffle(x, rng):
  """random.Random.shuffle(x), drawing exactly the same random bits."""
  if not _FAST_RANDOM:
    rng.shuffle(x)
    return
  getrandbits = rng.getrandbits
  k = len(x).bit_length()  # bits of the bound i + 1, which only falls
  low = 1 << (k - 1) if k else 0
  for i in range(len(x) - 1, 0, -1):
    n = i + 1
    if n < low:
      k -= 1
      low >>= 1
    j = getrandbits(k)
    while j >= n:
      j = getrandbits(k)
    x[i], x[j] = x[j], x[i]


def _randint(rng, a, b):
  """rng.randint(a, b), drawing exactly the same random bits."""
  if not _FAST_RANDOM:
    return rng.randint(a, b)
  n = b - a + 1
  k = n.bit_length()
  r = rng.getrandbits(k)
  while r >= n:
    r = rng.getrandbits(k)
  return a + r


class Vocab:
  """The ids instance-making needs, checked up front."""

  def __init__(self, vocab, vocab_file="--vocab_file"):
    for token in ("[CLS]", "[SEP]", "[MASK]"):
      if token not in vocab:
        raise BertTfError(f"{vocab_file}: the vocab has no {token} token, which pretraining records need")
    self.cls_id = vocab["[CLS]"]
    self.sep_id = vocab["[SEP]"]
    self.mask_id = vocab["[MASK]"]
    # The original picks a random replacement from list(vocab.keys()).
    self.word_ids = [vocab[token] for token in vocab]
    self.size = max(vocab.values()) + 1
    is_continuation = np.zeros([self.size], np.bool_)
    for token, index in vocab.items():
      if token.startswith("##"):
        is_continuation[index] = True
    self.is_continuation = is_continuation


class Instances:
  """Instances as offsets: segment A is tokens[a0:a1], B is tokens[b0:b1] (empty for --no_nsp).

  spans: [N, 5] int64 (a0, a1, b0, b1, is_random_next); masked positions and replacement ids of
  instance i are positions[mask_starts[i]:mask_starts[i + 1]] (sorted) and replacements[...], where a
  replacement of -1 keeps the original token.

  While instances are made, InstanceMaker appends them to the pending lists (the cheapest thing its
  per-instance loop can do) and `flush` moves them into compact arrays, sorting each instance's
  masked positions with numpy (the original sorts them one instance at a time).
  """

  def __init__(self):
    self.spans = array("q")
    self.mask_starts = array("q", [0])
    self.positions = array("H")  # < max_seq_length <= 65535
    self.replacements = array("i")
    self.pending_spans = []
    self.pending_counts = []
    self.pending_positions = []  # in the order chosen
    self.pending_replacements = []

  def __len__(self):
    return len(self.mask_starts) - 1 + len(self.pending_counts)

  def flush(self):
    """Moves the instances made since the last flush into the arrays."""
    counts = np.asarray(self.pending_counts, np.int64)
    positions = np.asarray(self.pending_positions, np.int64)
    replacements = np.asarray(self.pending_replacements, np.int32)
    order = np.argsort(np.repeat(np.arange(len(counts)), counts) << 16 | positions)
    self.spans.frombytes(np.asarray(self.pending_spans, np.int64).tobytes())
    self.mask_starts.frombytes((np.cumsum(counts) + self.mask_starts[-1]).tobytes())
    self.positions.frombytes(positions[order].astype(np.uint16).tobytes())
    self.replacements.frombytes(replacements[order].tobytes())
    for pending in (self.pending_spans, self.pending_counts, self.pending_positions,
                    self.pending_replacements):
      pending.clear()

  def block(self, lo, hi):
    """Instances [lo, hi) (flushed) as an Instances of their own, frozen (what a worker serializes)."""
    m0, m1 = self.mask_starts[lo], self.mask_starts[hi]
    out = Instances()
    out.spans = np.frombuffer(self.spans[5 * lo:5 * hi], np.int64).reshape([-1, 5])
    out.mask_starts = np.frombuffer(self.mask_starts[lo:hi + 1], np.int64) - m0
    out.positions = np.frombuffer(self.positions[m0:m1], np.uint16)
    out.replacements = np.frombuffer(self.replacements[m0:m1], np.int32)
    return out

  def freeze(self):
    self.flush()
    self.spans = np.frombuffer(self.spans, np.int64).reshape([-1, 5])
    self.mask_starts = np.frombuffer(self.mask_starts, np.int64)
    self.positions = np.frombuffer(self.positions, np.uint16)
    self.replacements = np.frombuffer(self.replacements, np.int32)


class InstanceMaker:
  """create_training_instances of the original, on a Corpus of ids, with the same random draws."""

  def __init__(self, corpus, vocab, options, rng):
    self.corpus = corpus
    self.vocab = vocab
    self.options = options
    self.rng = rng
    self.instances = Instances()
    self.stats = collections.Counter()
    # Python arrays: element access in the per-instance loop is several times faster than numpy's.
    self.sentence_starts = array("q", corpus.sentence_starts.astype(np.int64).tobytes())
    self.document_starts = array("q", corpus.document_starts.astype(np.int64).tobytes())
    tokens = corpus.tokens
    self.has_specials = bool(np.any((tokens == vocab.cls_id) | (tokens == vocab.sep_id)))
    self.continues_word = vocab.is_continuation[tokens] if options.do_whole_word_mask else None
    # The original's second coin: keep vs random given not [MASK] (0.1 / (0.1 + 0.1) is exactly 0.5).
    keep_or_random = options.mask_prob_keep + options.mask_prob_random
    self.keep_given_not_mask = options.mask_prob_keep / keep_or_random if keep_or_random > 0 else 1.0

  def make(self, progress_seconds=30, on_block=None):
    """All instances and their output order (the original's final shuffle). `on_block`, if given, is
    called with each run of _WRITE_BLOCK instances (and the last, shorter run) as soon as it is made."""
    options, rng = self.options, self.rng
    handed_out = 0
    num_documents = self.corpus.num_documents
    order = list(range(num_documents))
    _shuffle(order, rng)
    self.order = order
    progress = Progress("making instances", progress_seconds)
    make_document = self._no_nsp_instances if options.no_nsp else self._document_instances
    instances = self.instances

    def hand_out(last):
      """Flushes, then gives on_block every whole block made (and, if last, the shorter rest)."""
      nonlocal handed_out
      instances.flush()
      while on_block is not None and len(instances) - handed_out >= (1 if last else _WRITE_BLOCK):
        on_block(instances.block(handed_out, min(handed_out + _WRITE_BLOCK, len(instances))))
        handed_out += _WRITE_BLOCK

    for dupe in range(options.dupe_factor):
      for document_index in range(num_documents):
        make_document(document_index)
        if len(instances.pending_counts) >= _WRITE_BLOCK:
          hand_out(last=False)
        if document_index % 256 == 0:
          progress.maybe_log(lambda s: f"pass {dupe + 1}/{options.dupe_factor}, document "
                             f"{document_index}/{num_documents}, {len(instances)} instances")
    hand_out(last=True)
    instances.freeze()
    self._count_masking(instances)
    # The original's rng.shuffle(instances) depends only on their number.
    output_order = list(range(len(instances)))
    _shuffle(output_order, rng)
    self.stats["instances"] = len(instances)
    return instances, np.asarray(output_order, np.int64)

  def _count_masking(self, instances):
    a0, a1, b0, b1, _ = instances.spans.T
    num_tokens = (a1 - a0) + (b1 - b0) + np.where(b1 > b0, 3, 2)
    # np.round, like Python's round, rounds halves to even.
    num_to_predict = np.minimum(self.options.max_predictions_per_seq,
                                np.maximum(1, np.round(num_tokens * self.options.masked_lm_prob)))
    self.stats["tokens"] = int(num_tokens.sum())
    self.stats["masked"] = len(instances.positions)
    self.stats["expected_masked"] = int(num_to_predict.sum())

  def _sentence_bounds(self, document_index):
    document = self.order[document_index]
    return self.sentence_starts[self.document_starts[document]:self.document_starts[document + 1] + 1]

  def _target_length(self, max_num_tokens):
    self.stats["documents"] += 1
    if self.rng.random() < self.options.short_seq_prob:
      self.stats["short_targets"] += 1
      return _randint(self.rng, 2, max_num_tokens)
    return max_num_tokens

  def _document_instances(self, document_index):
    """create_instances_from_document: sentence pairs, half with a random B (when there is a choice)."""
    rng = self.rng
    starts = self._sentence_bounds(document_index)
    num_sentences = len(starts) - 1
    max_num_tokens = self.options.max_seq_length - 3
    target_seq_length = self._target_length(max_num_tokens)
    chunk_first = 0
    current_length = 0
    i = 0
    while i < num_sentences:
      current_length += starts[i + 1] - starts[i]
      if i == num_sentences - 1 or current_length >= target_seq_length:
        chunk_size = i - chunk_first + 1
        a_end = _randint(rng, 1, chunk_size - 1) if chunk_size >= 2 else 1
        a0, a1 = starts[chunk_first], starts[chunk_first + a_end]
        if chunk_size == 1 or rng.random() < 0.5:
          is_random_next = 1
          self.stats["random_next_forced" if chunk_size == 1 else "random_next_drawn"] += 1
          b0, b1 = self._random_segment(document_index, target_seq_length - (a1 - a0))
          i -= chunk_size - a_end  # the unused sentences go back
        else:
          is_random_next = 0
          self.stats["actual_next"] += 1
          b0, b1 = a1, starts[i + 1]
        a0, a1, b0, b1 = self._truncate_pair(a0, a1, b0, b1, max_num_tokens)
        self._add(a0, a1, b0, b1, is_random_next)
        chunk_first = i + 1
        current_length = 0
      i += 1

  def _random_segment(self, document_index, target_b_length):
    """Whole sentences of another document from a random start, until target_b_length tokens."""
    rng = self.rng
    num_documents = len(self.order)
    for _ in range(10):
      random_document_index = _randint(rng, 0, num_documents - 1)
      if random_document_index != document_index:
        break
    document = self.order[random_document_index]
    first, last = self.document_starts[document], self.document_starts[document + 1]
    random_start = _randint(rng, 0, last - first - 1)
    sentence_starts = self.sentence_starts
    b0 = sentence_starts[first + random_start]
    # At least one sentence; then stop at the first sentence end reaching the target, or the document end.
    end = bisect.bisect_left(sentence_starts, b0 + target_b_length, first + random_start + 1, last)
    return b0, sentence_starts[end]

  def _truncate_pair(self, a0, a1, b0, b1, max_num_tokens):
    """truncate_seq_pair: drop a token from the front or the back of the longer segment, by coin flip."""
    random_ = self.rng.random
    while (a1 - a0) + (b1 - b0) > max_num_tokens:
      if a1 - a0 > b1 - b0:
        if random_() < 0.5:
          a0 += 1
        else:
          a1 -= 1
      elif random_() < 0.5:
        b0 += 1
      else:
        b1 -= 1
    return a0, a1, b0, b1

  def _no_nsp_instances(self, document_index):
    """The "No NSP" ablation: runs of whole sentences up to the target length, as one segment."""
    starts = self._sentence_bounds(document_index)
    num_sentences = len(starts) - 1
    max_num_tokens = self.options.max_seq_length - 2
    target_seq_length = self._target_length(max_num_tokens)
    chunk_first = 0
    for i in range(num_sentences):
      if i == num_sentences - 1 or starts[i + 1] - starts[chunk_first] >= target_seq_length:
        a0, a1 = starts[chunk_first], starts[i + 1]
        random_ = self.rng.random
        while a1 - a0 > max_num_tokens:
          if random_() < 0.5:
            a0 += 1
          else:
            a1 -= 1
        self._add(a0, a1, 0, 0, 0)
        chunk_first = i + 1

  def _candidates(self, a0, a1, b0, b1):
    """Positions that may be masked (all but [CLS]/[SEP]), grouped into whole words if asked."""
    len_a, len_b = a1 - a0, b1 - b0
    token_positions = list(range(1, len_a + 1)) + list(range(len_a + 2, len_a + 2 + len_b))
    if not (self.has_specials or self.continues_word is not None):
      return token_positions
    tokens = self.corpus.tokens
    ids = np.concatenate([tokens[a0:a1], tokens[b0:b1]])
    keep = (ids != self.vocab.cls_id) & (ids != self.vocab.sep_id)
    positions = np.asarray(token_positions, np.int64)[keep]
    if self.continues_word is None:
      return positions.tolist()
    # A "##" piece joins the word before it, even across the middle [SEP] (as the original).
    continues = np.concatenate([self.continues_word[a0:a1], self.continues_word[b0:b1]])[keep]
    if len(continues):
      continues[0] = False
    word_starts = np.flatnonzero(~continues).tolist() + [len(positions)]
    positions = positions.tolist()
    return [positions[s:e] for s, e in zip(word_starts[:-1], word_starts[1:])]

  def _add(self, a0, a1, b0, b1, is_random_next):
    """create_masked_lm_predictions: the masked positions, in the order chosen, and what they become."""
    options, rng, instances = self.options, self.rng, self.instances
    num_tokens = (a1 - a0) + (b1 - b0) + (3 if b1 > b0 else 2)
    num_to_predict = min(options.max_predictions_per_seq,
                         max(1, int(round(num_tokens * options.masked_lm_prob))))
    candidates = self._candidates(a0, a1, b0, b1)
    _shuffle(candidates, rng)
    if self.continues_word is None:
      chosen = candidates[:num_to_predict]
    else:
      chosen = []
      for word in candidates:
        if len(chosen) >= num_to_predict:
          break
        # A word that would overflow num_to_predict is skipped (words never overlap, so none is covered).
        if len(chosen) + len(word) <= num_to_predict:
          chosen.extend(word)
    instances.pending_spans.extend((a0, a1, b0, b1, is_random_next))
    instances.pending_counts.append(len(chosen))
    instances.pending_positions.extend(chosen)
    # What each chosen token becomes, drawn in the order chosen as the original does.
    random_, append = rng.random, instances.pending_replacements.append
    mask_prob, keep_prob = options.mask_prob_mask, self.keep_given_not_mask
    mask_id, word_ids = self.vocab.mask_id, self.vocab.word_ids
    for _ in chosen:
      if random_() < mask_prob:
        append(mask_id)
      elif random_() < keep_prob:
        append(-1)
      else:
        append(word_ids[_randint(rng, 0, len(word_ids) - 1)])


# ----------------------------------------------------------------------------------------------------
# Writing.

_write_state = None  # (corpus tokens, instances, output order, RecordEncoder), inherited by workers


def instance_features(tokens, instances, index, vocab, options):
  """The original's record of one instance: an OrderedDict of padded int / float lists."""
  a0, a1, b0, b1, is_random_next = (int(v) for v in instances.spans[index])
  max_seq_length = options.max_seq_length
  len_a, len_b = a1 - a0, b1 - b0
  input_ids = np.zeros([max_seq_length], np.int64)
  input_ids[0] = vocab.cls_id
  input_ids[1:1 + len_a] = tokens[a0:a1]
  input_ids[1 + len_a] = vocab.sep_id
  length = len_a + 2
  if len_b:
    input_ids[length:length + len_b] = tokens[b0:b1]
    input_ids[length + len_b] = vocab.sep_id
    length += len_b + 1
  input_mask = np.zeros([max_seq_length], np.int64)
  input_mask[:length] = 1
  segment_ids = np.zeros([max_seq_length], np.int64)
  segment_ids[len_a + 2:length] = 1

  m0, m1 = instances.mask_starts[index:index + 2]
  positions = instances.positions[m0:m1]
  labels = input_ids[positions]
  replacements = instances.replacements[m0:m1]
  input_ids[positions] = np.where(replacements < 0, labels, replacements)
  num_masked = m1 - m0
  padding = [0] * (options.max_predictions_per_seq - num_masked)

  features = collections.OrderedDict()
  features["input_ids"] = input_ids.tolist()
  features["input_mask"] = input_mask.tolist()
  features["segment_ids"] = segment_ids.tolist()
  features["masked_lm_positions"] = positions.tolist() + padding
  features["masked_lm_ids"] = labels.tolist() + padding
  features["masked_lm_weights"] = [1.0] * num_masked + [0.0] * len(padding)
  features["next_sentence_labels"] = [is_random_next]
  return features


def _varint(value):
  out = bytearray()
  while value > 0x7F:
    out.append((value & 0x7F) | 0x80)
    value >>= 7
  out.append(value)
  return bytes(out)


def _field(number, payload):
  """A length-delimited protobuf field."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _ranges(starts, lengths):
  """np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lengths)]), without the loop."""
  offsets = np.cumsum(lengths) - lengths
  return np.repeat(starts - offsets, lengths) + np.arange(int(np.sum(lengths)))


class RecordEncoder:
  """Serializes instances straight to the bytes records.serialize(instance_features(...)) gives.

  A tf.train.Example is a map of name -> Feature; deterministic serialization writes the names in
  sorted order, each list as one packed field. Building protobuf objects cost ~100 us a record. Here
  the id lists of a block of records are put together and varint-encoded by numpy, and a record is the
  join of its slices of those bytes with framing that depends only on lengths, padding and the few
  lists that take few values (tests check the bytes are the same).
  """

  def __init__(self, vocab, options):
    self.vocab = vocab
    self.options = options
    self.prefixes = {}
    self.message_prefixes = {}
    self.segment_entries = {}
    max_seq_length, max_predictions = options.max_seq_length, options.max_predictions_per_seq
    # Padding of the id lists (input_ids, masked_lm_ids/positions): one zero byte per value.
    self.zeros = [b"\x00" * n for n in range(max(max_seq_length, max_predictions) + 1)]
    # The lists that take few values are built once: the input mask and the weights by length, the label.
    self.mask_entries = [self._entry("input_mask", 3, b"\x01" * n + b"\x00" * (max_seq_length - n))
                         for n in range(max_seq_length + 1)]
    float_one, float_zero = b"\x00\x00\x80\x3f", b"\x00\x00\x00\x00"
    self.weight_entries = [self._entry("masked_lm_weights", 2, float_one * m + float_zero * (max_predictions - m))
                           for m in range(max_predictions + 1)]
    self.label_entries = [self._entry("next_sentence_labels", 3, _varint(label)) for label in (0, 1)]
    # Varint bytes of every id and position, zero-padded to one width, and how many of them count.
    varints = [_varint(v) for v in range(max(vocab.size, options.max_seq_length))]
    self.varint_lengths = np.array([len(v) for v in varints], np.int64)
    width = int(self.varint_lengths.max())
    self.varint_table = np.frombuffer(b"".join(v.ljust(width, b"\x00") for v in varints),
                                      np.uint8).reshape([-1, width])

  def encode(self, tokens, instances, index):
    return self.encode_block(tokens, instances, np.asarray([index]))[0]

  def encode_block(self, tokens, instances, indexes):
    """The records of instances[indexes], in that order."""
    options, vocab = self.options, self.vocab
    a0, a1, b0, b1, is_random_next = instances.spans[indexes].T
    len_a, len_b = a1 - a0, b1 - b0
    length = len_a + 2 + np.where(len_b > 0, len_b + 1, 0)
    # The ids of all records, unpadded and back to back: [CLS] A [SEP] (B [SEP]).
    starts = np.cumsum(length) - length
    ids = np.empty([int(np.sum(length))], np.int64)
    ids[starts] = vocab.cls_id
    ids[_ranges(starts + 1, len_a)] = tokens[_ranges(a0, len_a)]
    ids[starts + 1 + len_a] = vocab.sep_id
    ids[_ranges(starts + 2 + len_a, len_b)] = tokens[_ranges(b0, len_b)]
    ids[(starts + length - 1)[len_b > 0]] = vocab.sep_id
    # Masked positions: the labels are the tokens there; the input takes the replacement (-1: kept).
    m0 = instances.mask_starts[indexes]
    num_masked = instances.mask_starts[indexes + 1] - m0
    masked = _ranges(m0, num_masked)
    positions = instances.positions[masked].astype(np.int64)
    at = np.repeat(starts, num_masked) + positions
    labels = ids[at]
    replacements = instances.replacements[masked]
    ids[at] = np.where(replacements < 0, labels, replacements)

    ids_bytes, ids_bounds = self._varints(ids, length)
    labels_bytes, labels_bounds = self._varints(labels, num_masked)
    positions_bytes, positions_bounds = self._varints(positions, num_masked)
    max_seq_length, max_predictions = options.max_seq_length, options.max_predictions_per_seq
    entry, zeros, message_prefix = self._entry_with_prefix, self.zeros, self._message_prefix
    mask_entries, weight_entries = self.mask_entries, self.weight_entries
    label_entries, segment_entry = self.label_entries, self._segment_entry
    serialized = []
    for i, (n, m, la, nsp) in enumerate(zip(length.tolist(), num_masked.tolist(), len_a.tolist(),
                                            is_random_next.tolist())):
      features = b"".join((
          entry("input_ids", ids_bytes[ids_bounds[i]:ids_bounds[i + 1]] + zeros[max_seq_length - n]),
          mask_entries[n],
          entry("masked_lm_ids",
                labels_bytes[labels_bounds[i]:labels_bounds[i + 1]] + zeros[max_predictions - m]),
          entry("masked_lm_positions",
                positions_bytes[positions_bounds[i]:positions_bounds[i + 1]] + zeros[max_predictions - m]),
          weight_entries[m],
          label_entries[nsp],
          segment_entry(la, n),
      ))
      serialized.append(message_prefix(len(features)) + features)
    return serialized

  def _varints(self, values, counts):
    """Varints of `values`, back to back, and where each record's run of `counts` values starts and ends."""
    num_bytes = self.varint_lengths[values]
    ends = np.cumsum(num_bytes)
    out = np.empty([int(ends[-1]) if len(ends) else 0], np.uint8)
    starts = ends - num_bytes
    codes = self.varint_table[values]
    for k in range(codes.shape[1]):
      longer = num_bytes > k
      out[starts[longer] + k] = codes[longer, k]
    record_ends = np.concatenate([[0], ends])[np.cumsum(counts)]
    return out.tobytes(), np.concatenate([[0], record_ends]).tolist()

  def _entry_with_prefix(self, name, packed):
    """An int64 list entry: its framing depends only on the name and the payload's length."""
    key = (name, len(packed))
    prefix = self.prefixes.get(key)
    if prefix is None:
      prefix = self.prefixes[key] = self._entry(name, 3, b"\x00" * len(packed))[:-len(packed)]
    return prefix + packed

  def _segment_entry(self, len_a, length):
    key = (len_a, length)
    entry = self.segment_entries.get(key)
    if entry is None:
      entry = self.segment_entries[key] = self._entry(
          "segment_ids", 3, b"\x00" * (len_a + 2) + b"\x01" * (length - len_a - 2)
          + b"\x00" * (self.options.max_seq_length - length))
    return entry

  def _message_prefix(self, size):
    """The Example's field 1 (its Features) framing: a tag and the length."""
    prefix = self.message_prefixes.get(size)
    if prefix is None:
      prefix = self.message_prefixes[size] = _varint(1 << 3 | 2) + _varint(size)
    return prefix

  def _entry(self, name, kind, packed):
    """One map entry of Features: name -> Feature{int64_list (3) or float_list (2) {packed values}}."""
    return _field(1, _field(1, name.encode()) + _field(2, _field(kind, _field(1, packed))))


def _serialize_block(bounds):
  """The records in output positions [lo, hi), as TFRecord file bytes for each of the `num_files`
  round-robin output files: the j-th holds records lo + j, lo + j + num_files, ..."""
  tokens, instances, output_order, encoder = _write_state
  lo, hi, num_files = bounds
  serialized = encoder.encode_block(tokens, instances, output_order[lo:hi])
  return [records.tfrecord_bytes(serialized[j::num_files]) for j in range(num_files)]


def _write_blocks(output_files, file_bytes_blocks, total, progress_seconds):
  """Writes blocks of records, each given as TFRecord bytes per output file (see _serialize_block);
  record k of the run goes to file k % len(output_files). Each file appears whole or not at all."""
  progress = Progress("writing", progress_seconds)
  written = 0
  with contextlib.ExitStack() as stack:
    writers = []
    for path in output_files:
      tmp = stack.enter_context(fileio.atomic_output(path))
      writers.append(stack.enter_context(fileio.open_file(tmp, "wb")))
    for (lo, hi, _), file_bytes in file_bytes_blocks:
      for j, data in enumerate(file_bytes):
        writers[(lo + j) % len(writers)].write(data)
      written += hi - lo
      progress.maybe_log(lambda s: f"{written}/{total} instances, {written / max(s, 1e-9):.0f}/s")
    for writer in writers:
      writer.close()
  return written


def _output_blocks(total, num_files):
  return [(lo, min(lo + _WRITE_BLOCK, total), num_files) for lo in range(0, total, _WRITE_BLOCK)]


def write_instances(corpus, instances, output_order, vocab, options, output_files, progress_seconds=30):
  """Writes records in `output_order`, round-robin over `output_files`, in this process (see Spool for
  more than one worker); each file appears whole or not at all."""
  global _write_state
  _write_state = (corpus.tokens, instances, output_order, RecordEncoder(vocab, options))
  blocks = _output_blocks(len(output_order), len(output_files))
  try:
    return _write_blocks(output_files, zip(blocks, map(_serialize_block, blocks)), len(output_order),
                         progress_seconds)
  finally:
    _write_state = None


def _spool_block(path, block):
  """Serializes and frames a block of instances in making order into `path`; returns each frame's size."""
  tokens, _, _, encoder = _write_state
  serialized = encoder.encode_block(tokens, block, np.arange(len(block)))
  with open(path, "wb") as f:
    f.write(records.tfrecord_bytes(serialized))
  return np.fromiter(map(len, serialized), np.int64, len(serialized)) + 16  # + TFRecord framing


class Spool:
  """Records serialized by worker processes while instances are still being made.

  Making is one random stream in one process, and the output order is known only at its end (the
  original's final shuffle), so with more than one worker the others serialize and frame each block
  of instances as it is made, in making order, into a temporary file; `write` then copies the frames
  out in output order. Costs disk space the size of the output, in a directory beside it.
  """

  def __init__(self, tokens, encoder, num_processes, output_files):
    global _write_state
    _write_state = (tokens, None, None, encoder)
    first = output_files[0]
    local_dir = None if fileio.is_url(first) else os.path.dirname(os.path.abspath(first))
    # The pid in the name lets a later run of the same output remove it if this one is killed.
    self._dir = tempfile.mkdtemp(prefix=f".{os.path.basename(first)}.spool-{os.getpid()}-",
                                 dir=local_dir)
    self._workers = _forked_workers(num_processes)  # forks at the first submit, after _write_state is set
    self._num_processes = num_processes
    self._pending = []

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    global _write_state
    _write_state = None
    self._workers.shutdown(wait=True, cancel_futures=True)
    shutil.rmtree(self._dir, ignore_errors=True)

  def add(self, block):
    path = os.path.join(self._dir, f"{len(self._pending)}.bin")
    self._pending.append(self._workers.submit(_spool_block, path, block))

  def write(self, output_order, output_files, progress_seconds=30):
    """Writes the spooled records in `output_order` (indices in making order), as write_instances.

    Local output files are written by every process at once, each a run of output positions at
    byte offsets known from the frame sizes; URLs by this process alone.
    """
    with _if_a_worker_dies("serializing records"):
      block_sizes = [future.result() for future in self._pending]
    num_blocks, total, num_files = len(block_sizes), len(output_order), len(output_files)
    sizes = np.concatenate(block_sizes)
    # Where each record's frame starts in its block's file, in output order.
    block_offsets = np.cumsum([0] + [int(size.sum()) for size in block_sizes[:-1]])
    starts = np.cumsum(sizes) - sizes - np.repeat(block_offsets, [len(size) for size in block_sizes])
    frame_sizes, begins = sizes[output_order], starts[output_order]
    frames = (output_order // _WRITE_BLOCK, begins, begins + frame_sizes)
    if any(fileio.is_url(path) for path in output_files):
      with _mapped_blocks(self._dir, num_blocks) as spooled:
        gathered = (((lo, hi, n), _gathered_frames(spooled, [a[lo:hi] for a in frames], n))
                    for lo, hi, n in _output_blocks(total, num_files))
        return _write_blocks(output_files, gathered, total, progress_seconds)

    # Record k goes to file k % num_files: where each file's part of a run of positions starts.
    ends = [np.cumsum(frame_sizes[f::num_files]) for f in range(num_files)]
    parts = np.linspace(0, total, self._num_processes + 2).astype(np.int64).tolist()

    def offsets(first):
      return [int(ends[f][(first - f + num_files - 1) // num_files - 1]) if first > f else 0
              for f in range(num_files)]

    with contextlib.ExitStack() as stack:
      paths = [stack.enter_context(fileio.atomic_output(path)) for path in output_files]
      for path in paths:
        open(path, "wb").close()
      copies = [self._workers.submit(_copy_spooled, self._dir, num_blocks, [a[lo:hi] for a in frames], lo,
                                     paths, offsets(lo)) for lo, hi in zip(parts[1:-1], parts[2:])]
      written = _copy_spooled(self._dir, num_blocks, [a[:parts[1]] for a in frames], 0, paths, offsets(0),
                              progress_seconds, total)
      with _if_a_worker_dies("copying records out"):
        written += sum(copy.result() for copy in copies)
    return written


@contextlib.contextmanager
def _mapped_blocks(spool_dir, num_blocks):
  with contextlib.ExitStack() as stack:
    spooled = []
    for i in range(num_blocks):
      f = stack.enter_context(open(os.path.join(spool_dir, f"{i}.bin"), "rb"))
      spooled.append(stack.enter_context(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)))
    yield spooled


def _gathered_frames(spooled, frames, num_files):
  """A run of records as TFRecord bytes per round-robin output file (as _serialize_block gives them):
  frames[0/1/2][i] are the spooled block, begin and end of the run's i-th record."""
  blocks, begins, ends = (a.tolist() for a in frames)
  return [b"".join([spooled[b][begin:end] for b, begin, end in
                    zip(blocks[j::num_files], begins[j::num_files], ends[j::num_files])])
          for j in range(num_files)]


def _copy_spooled(spool_dir, num_blocks, frames, first, paths, offsets, progress_seconds=None, total=None):
  """Copies the records at output positions first, first + 1, ... (`frames` as _gathered_frames) into the local
  files `paths` (record k into paths[k % len(paths)]), from byte offsets[f] of each; returns how many."""
  num_files, count = len(paths), len(frames[0])
  offsets = list(offsets)
  progress = Progress("writing", progress_seconds)
  fds = [os.open(path, os.O_WRONLY) for path in paths]
  try:
    with _mapped_blocks(spool_dir, num_blocks) as spooled:
      for lo in range(0, count, _WRITE_BLOCK):
        hi = min(lo + _WRITE_BLOCK, count)
        for j, data in enumerate(_gathered_frames(spooled, [a[lo:hi] for a in frames], num_files)):
          f = (first + lo + j) % num_files
          view = memoryview(data)
          while view:
            n = os.pwrite(fds[f], view, offsets[f])
            offsets[f] += n
            view = view[n:]
        progress.maybe_log(lambda s: f"{hi}/{count} instances of this process's share of {total}")
  finally:
    for fd in fds:
      os.close(fd)
  return count


# ----------------------------------------------------------------------------------------------------
# The whole run, and shards of a large corpus.


def shard_seed(random_seed, shard_index, num_shards):
  """The seed of one shard: --random_seed itself when there is one shard, else derived from both."""
  if num_shards == 1:
    return random_seed
  digest = hashlib.sha256(f"{random_seed}/{shard_index}/{num_shards}".encode()).digest()
  return int.from_bytes(digest[:4], "little")


def shard_output_files(output_files, shard_index, num_shards):
  if num_shards == 1:
    return list(output_files)
  return [f"{path}-{shard_index:05d}-of-{num_shards:05d}" for path in output_files]


def shard_input_files(input_files, shard_index, num_shards):
  """Input files of one shard: every num_shards-th file of the sorted list, from shard_index."""
  return input_files[shard_index::num_shards]


def create_pretraining_data(input_files, output_files, tokenizer, options, num_workers=1,
                            progress_seconds=30):
  """Reads, makes instances and writes records as the original does; returns counts for the log."""
  options.validate()
  if not output_files:
    raise BertTfError("--output_file: no output file given")
  for path in output_files:
    if fileio.is_url(path):
      continue
    if os.path.isdir(path):
      raise BertTfError(f"--output_file: {path} is a directory; expected the path of a file")
    for stale in fileio.remove_stale_temporaries(path):
      logging.info("Removed %s, left by an earlier run of this output that was killed", stale)
  vocab = Vocab(tokenizer.vocab)
  start = time.time()
  corpus = read_corpus(input_files, tokenizer, num_workers, progress_seconds)
  if corpus.num_documents == 0:
    raise BertTfError(f"--input_file: no text in {', '.join(input_files)} (every line is blank or "
                      f"tokenizes to nothing)")
  read_seconds = time.time() - start
  maker = InstanceMaker(corpus, vocab, options, random.Random(options.random_seed))
  if num_workers > 1:
    with Spool(corpus.tokens, RecordEncoder(vocab, options), num_workers - 1, output_files) as spool:
      _, output_order = maker.make(progress_seconds, on_block=spool.add)
      make_seconds = time.time() - start - read_seconds
      written = spool.write(output_order, output_files, progress_seconds)
  else:
    instances, output_order = maker.make(progress_seconds)
    make_seconds = time.time() - start - read_seconds
    written = write_instances(corpus, instances, output_order, vocab, options, output_files,
                              progress_seconds=progress_seconds)
  stats = collections.Counter({f"corpus_{k}": v for k, v in corpus.stats.items()})
  stats.update({f"instances_{k}": v for k, v in maker.stats.items()})
  stats["written"] = written
  stats["seconds_reading"] = read_seconds
  stats["seconds_making"] = make_seconds
  stats["seconds_total"] = time.time() - start
  logging.info("Read %.1f MB (%d documents, %d tokens) in %.1f s; made %d instances in %.1f s; "
               "wrote them in %.1f s: %.2f MB/s overall", corpus.stats["bytes"] / 1e6,
               corpus.num_documents, len(corpus.tokens), read_seconds, written, make_seconds,
               stats["seconds_total"] - read_seconds - make_seconds,
               corpus.stats["bytes"] / 1e6 / max(stats["seconds_total"], 1e-9))
  return stats


def check_shards(input_files, output_files, options, num_shards):
  """One-line errors for flags that would fail every shard."""
  options.validate()
  if num_shards < 1:
    raise BertTfError(f"--num_shards: must be at least 1, got {num_shards}")
  if len(input_files) < num_shards:
    raise BertTfError(f"--num_shards: {num_shards} shards but only {len(input_files)} input files")
  if not output_files:
    raise BertTfError("--output_file: no output file given")


def run_shards(input_files, output_files, tokenizer, options, num_shards=1, shard_index=None, num_workers=1,
               progress_seconds=30):
  """create_pretraining_data over shards of the input files; returns the shard indices written.

  One shard (the default) is the original's run. With num_shards > 1, shard i takes every
  num_shards-th input file from the i-th, its own seed, and output names with a -0000i-of-0000N suffix;
  shard_index=None does every shard whose outputs do not all exist yet, so a rerun resumes.
  """
  if num_workers < 1:
    raise BertTfError(f"--num_workers: must be at least 1, got {num_workers}")
  if shard_index is not None and not 0 <= shard_index < num_shards:
    raise BertTfError(f"--shard_index: must be in [0, {num_shards}), got {shard_index}")
  check_shards(input_files, output_files, options, num_shards)
  written = []
  for shard in range(num_shards) if shard_index is None else [shard_index]:
    shard_outputs = shard_output_files(output_files, shard, num_shards)
    if num_shards > 1 and all(fileio.exists(path) for path in shard_outputs):
      logging.info("Shard %d: %s already written, skipped", shard, ", ".join(shard_outputs))
      continue
    shard_inputs = shard_input_files(input_files, shard, num_shards)
    logging.info("*** Reading from input files ***")
    for path in shard_inputs:
      logging.info("  %s", path)
    logging.info("*** Writing to output files ***")
    for path in shard_outputs:
      logging.info("  %s", path)
    shard_options = dataclasses.replace(options, random_seed=shard_seed(options.random_seed, shard, num_shards))
    create_pretraining_data(shard_inputs, shard_outputs, tokenizer, shard_options, num_workers,
                            progress_seconds)
    written.append(shard)
  return written

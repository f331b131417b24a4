"""Pretraining instances: the original create_pretraining_data.py's records, record for record, at corpus scale.

The original draws every choice from one `random.Random(random_seed)` in a fixed pattern, so the same
flags give the same records in the same order. We keep that pattern call for call (which is why the
choosing stays in one process), but everything around it is done differently:

* Reading and tokenizing run in `num_workers` processes over chunks of lines, in order.
* The corpus is held as token ids in one numpy array with sentence offsets, not lists of strings.
* An instance is kept as four offsets into that array plus its masked positions and replacements; the
  token ids are only put together when the record is serialized. With more than one worker, the
  others serialize each block of instances while the next ones are made (pretraining_records.Spool).
* A shuffle consumes the random stream exactly as `random.Random.shuffle` does, without its
  per-element Python call overhead.
* TensorFlow is not imported (it takes seconds to load): files are read and written with Python's
  I/O (tf.io.gfile only for gs:// and other URLs) and records are framed by records.tfrecord_bytes.

Memory is about 2 bytes a token (4 for vocabs over 65,536 ids) plus 48 bytes an instance and 6 bytes
a masked token (~170 bytes an instance at 20 predictions), where the original holds every document and
every instance as Python lists of strings. All instances are held until the final shuffle, as in the
original; to bound memory on a very large corpus, split it into shards (run_shards).

The work is split by concern: bert_tf/data/corpus.py reads and tokenizes, this module chooses the
instances (the original's algorithm: InstanceMaker), bert_tf/data/pretraining_records.py serializes
and writes them (RecordEncoder, Spool), bert_tf/workers.py runs the worker processes.
"""
import bisect
import collections
import dataclasses
import hashlib
import os
import random
import time
from array import array

import numpy as np
from absl import logging

from bert_tf import fileio
from bert_tf.progress import Progress
from bert_tf.progress import format_duration
from bert_tf.progress import summary
from bert_tf.data.corpus import read_corpus
from bert_tf.data import pretraining_records
from bert_tf.data.pretraining_records import RecordEncoder
from bert_tf.data.pretraining_records import Spool
from bert_tf.data.pretraining_records import write_instances
from bert_tf.errors import BertTfError


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
    called with each run of pretraining_records.WRITE_BLOCK instances (and the last, shorter run) as
    soon as it is made."""
    options, rng = self.options, self.rng
    block = pretraining_records.WRITE_BLOCK
    handed_out = 0
    num_documents = self.corpus.num_documents
    order = list(range(num_documents))
    _shuffle(order, rng)
    self.order = order
    progress = Progress("making instances", total=options.dupe_factor * num_documents,
                        unit="documents", seconds=progress_seconds)
    make_document = self._no_nsp_instances if options.no_nsp else self._document_instances
    instances = self.instances

    def hand_out(last):
      """Flushes, then gives on_block every whole block made (and, if last, the shorter rest)."""
      nonlocal handed_out
      instances.flush()
      while on_block is not None and len(instances) - handed_out >= (1 if last else block):
        on_block(instances.block(handed_out, min(handed_out + block, len(instances))))
        handed_out += block

    for dupe in range(options.dupe_factor):
      for document_index in range(num_documents):
        make_document(document_index)
        if len(instances.pending_counts) >= block:
          hand_out(last=False)
        if document_index % 256 == 0:
          progress.update(dupe * num_documents + document_index,
                          f"pass {dupe + 1}/{options.dupe_factor}, {len(instances)} instances")
    progress.update(options.dupe_factor * num_documents, f"{len(instances)} instances")
    progress.close()
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
  start = time.time()
  written, paths, totals = [], [], collections.Counter()
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
    totals.update(create_pretraining_data(shard_inputs, shard_outputs, tokenizer, shard_options,
                                          num_workers, progress_seconds))
    written.append(shard)
    paths.extend(shard_outputs)
  _summary(start, paths, totals, written if num_shards > 1 else None)
  return written


def _summary(start, paths, totals, shards):
  figures = {"instances written": totals["written"], "documents": totals["corpus_documents"],
             "tokens": totals["corpus_tokens"], "MB read": totals["corpus_bytes"] / 1e6}
  if shards is not None:
    figures["shards written"] = len(shards)
  summary(f"Finished in {format_duration(time.time() - start)}",
          [("records", ", ".join(paths) or "none (every shard was there already)")], figures)

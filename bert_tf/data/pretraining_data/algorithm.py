"""The original create_pretraining_data.py's algorithm, record for record, at corpus scale.

InstanceMaker holds the original's functions under their names, in its order:
create_training_instances (the document shuffle, dupe_factor passes, the final shuffle),
create_instances_from_document, create_masked_lm_predictions and truncate_seq_pair. They draw every
choice from one `random.Random(random_seed)` call for call as the original does, so the same flags
give the same records in the same order (which is why the choosing stays in one process). What
differs is the representation:

* The corpus is token ids in one numpy array with sentence offsets (bert_tf/data/pretraining_data/corpus.py), not
  lists of strings.
* An instance is four offsets into that array plus its masked positions and replacements
  (Instances); the token ids are put together only when the record is serialized
  (bert_tf/data/pretraining_data/record_bytes.py).
* A shuffle consumes the random stream exactly as `random.Random.shuffle` does, without its
  per-element Python call overhead (_shuffle, _randint).

Memory is about 2 bytes a token (4 for vocabs over 65,536 ids) plus 48 bytes an instance and 6 bytes
a masked token (~170 bytes an instance at 20 predictions), where the original holds every document and
every instance as Python lists of strings. The whole run (read, make, write, shards) is
bert_tf/data/pretraining_data/pipeline.py.
"""
import bisect
import collections
import dataclasses
import random
from array import array

import numpy as np

from bert_tf.data.pretraining_data import record_writer
from bert_tf.errors import BertTfError
from bert_tf.io.progress import Progress
from bert_tf.model import objectives
from bert_tf.model.config import check_max_seq_length
from bert_tf.options import MODEL
from bert_tf.options import check_fields
from bert_tf.options import option


# random.Random.shuffle/randint draw through _randbelow_with_getrandbits; _shuffle and _randint below
# draw the same bits without the Python call overhead. On an interpreter where that is not the case,
# fall back to the Random methods themselves.
_FAST_RANDOM = random.Random._randbelow is random.Random._randbelow_with_getrandbits
# Instances hold their masked positions in 16 bits (Instances.positions).
MAX_SEQ_LENGTH = 65535


@dataclasses.dataclass(frozen=True)
class Options:
  """How instances are made: the original's flags, the masking (a bert_tf.model.objectives.Masking,
  with its rules) and the NSP ablation."""
  max_seq_length: int = option(128, "Maximum sequence length.")
  random_seed: int = option(12345, "Random seed for data generation.")
  dupe_factor: int = option(10, "Number of times to duplicate the input data (with different "
                            "masks).", at_least=1)
  short_seq_prob: float = option(0.1, "Probability of creating sequences which are shorter than "
                                 "the maximum length.", fraction=True)
  masking: objectives.Masking = objectives.Masking()
  no_nsp: bool = option(False, "Write single-segment instances with no next-sentence pairing (the "
                        "\"No NSP\" ablation); next_sentence_labels is always 0.", MODEL)
  unmasked: bool = option(
      False, "Write records without masks, for run_pretraining.py --dynamic_masking, which draws "
      "them at input time: input_ids (the text itself), input_mask, segment_ids and "
      "next_sentence_labels, no masked_lm_* features; --dupe_factor=1 then suffices. The masking "
      "flags are not used.")

  def __post_init__(self):
    check_max_seq_length(self.max_seq_length, MAX_SEQ_LENGTH, "instances hold their positions in "
                         "16 bits (up to {})")
    check_fields(self)

  @property
  def max_predictions_per_seq(self):
    """The masked-LM slots of a record."""
    return self.masking.max_predictions_per_seq


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
  """The original's create_training_instances, create_instances_from_document,
  create_masked_lm_predictions and truncate_seq_pair, in that order, on a Corpus of ids, with the
  same random draws."""

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
    self.masking = masking = options.masking
    self.continues_word = vocab.is_continuation[tokens] if masking.do_whole_word_mask else None
    self.keep_given_not_mask = masking.keep_given_not_mask

  def create_training_instances(self, progress_seconds=30, on_block=None):
    """The original's create_training_instances, from its document shuffle on: dupe_factor passes
    over the documents, then the final shuffle. Returns the instances and their output order.
    `on_block`, if given, is called with each run of record_writer.WRITE_BLOCK instances (and
    the last, shorter run) as soon as it is made."""
    options, rng = self.options, self.rng
    block = record_writer.WRITE_BLOCK
    handed_out = 0
    num_documents = self.corpus.num_documents
    order = list(range(num_documents))
    _shuffle(order, rng)
    self.order = order
    progress = Progress("making instances", total=options.dupe_factor * num_documents,
                        unit="documents", seconds=progress_seconds)
    make_document = self._no_nsp_instances if options.no_nsp else self.create_instances_from_document
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

  def create_instances_from_document(self, document_index):
    """The original's create_instances_from_document: chunks of sentences up to a target length,
    split into A and B, B the actual next sentences or, half the time (always for a one-sentence
    chunk), sentences of a random other document."""
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
        a0, a1, b0, b1 = self.truncate_seq_pair(a0, a1, b0, b1, max_num_tokens)
        self.create_masked_lm_predictions(a0, a1, b0, b1, is_random_next)
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

  def _target_length(self, max_num_tokens):
    self.stats["documents"] += 1
    if self.rng.random() < self.options.short_seq_prob:
      self.stats["short_targets"] += 1
      return _randint(self.rng, 2, max_num_tokens)
    return max_num_tokens

  def _sentence_bounds(self, document_index):
    document = self.order[document_index]
    return self.sentence_starts[self.document_starts[document]:self.document_starts[document + 1] + 1]

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
        self.create_masked_lm_predictions(a0, a1, 0, 0, 0)
        chunk_first = i + 1

  def create_masked_lm_predictions(self, a0, a1, b0, b1, is_random_next):
    """The original's create_masked_lm_predictions, then the instance is kept: the masked positions,
    in the order chosen, and what each becomes ([MASK], itself or a random token)."""
    options, masking, rng, instances = self.options, self.masking, self.rng, self.instances
    num_tokens = (a1 - a0) + (b1 - b0) + (3 if b1 > b0 else 2)
    num_to_predict = min(masking.max_predictions_per_seq,
                         max(1, int(round(num_tokens * masking.masked_lm_prob))))
    candidates = [] if options.unmasked else self._candidates(a0, a1, b0, b1)
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
    mask_prob, keep_prob = masking.mask_prob_mask, self.keep_given_not_mask
    mask_id, word_ids = self.vocab.mask_id, self.vocab.word_ids
    for _ in chosen:
      if random_() < mask_prob:
        append(mask_id)
      elif random_() < keep_prob:
        append(-1)
      else:
        append(word_ids[_randint(rng, 0, len(word_ids) - 1)])

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

  def truncate_seq_pair(self, a0, a1, b0, b1, max_num_tokens):
    """The original's truncate_seq_pair: drop a token from the front or the back of the longer
    segment, by coin flip, until the pair fits."""
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

  def _count_masking(self, instances):
    a0, a1, b0, b1, _ = instances.spans.T
    num_tokens = (a1 - a0) + (b1 - b0) + np.where(b1 > b0, 3, 2)
    # np.round, like Python's round, rounds halves to even.
    num_to_predict = np.minimum(self.masking.max_predictions_per_seq,
                                np.maximum(1, np.round(num_tokens * self.masking.masked_lm_prob)))
    self.stats["tokens"] = int(num_tokens.sum())
    self.stats["masked"] = len(instances.positions)
    self.stats["expected_masked"] = 0 if self.options.unmasked else int(num_to_predict.sum())

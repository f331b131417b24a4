"""Writing create_pretraining_data's records: instances serialized straight to the bytes of
tf.train.Example (RecordEncoder, tested against TensorFlow's own), framed as TFRecords, in the
output order, round-robin over the output files; with worker processes, spooled while instances
are made and copied out in parallel (Spool). Each output file appears whole or not at all."""
import collections
import contextlib
import mmap
import os
import shutil
import tempfile

import numpy as np

from bert_tf import fileio
from bert_tf import records
from bert_tf import workers
from bert_tf.progress import Progress

# Instances per unit of parallel serialization.
WRITE_BLOCK = 5000

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
  progress = Progress("writing", total=total, unit="instances", seconds=progress_seconds)
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
      progress.update(written)
    for writer in writers:
      writer.close()
  progress.close()
  return written


def _output_blocks(total, num_files):
  return [(lo, min(lo + WRITE_BLOCK, total), num_files) for lo in range(0, total, WRITE_BLOCK)]


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
    self._workers = workers.forked_workers(num_processes)  # forks at the first submit, after _write_state is set
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
    with workers.if_a_worker_dies("serializing records"):
      block_sizes = [future.result() for future in self._pending]
    num_blocks, total, num_files = len(block_sizes), len(output_order), len(output_files)
    sizes = np.concatenate(block_sizes)
    # Where each record's frame starts in its block's file, in output order.
    block_offsets = np.cumsum([0] + [int(size.sum()) for size in block_sizes[:-1]])
    starts = np.cumsum(sizes) - sizes - np.repeat(block_offsets, [len(size) for size in block_sizes])
    frame_sizes, begins = sizes[output_order], starts[output_order]
    frames = (output_order // WRITE_BLOCK, begins, begins + frame_sizes)
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
      with workers.if_a_worker_dies("copying records out"):
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
  progress = Progress("writing", seconds=progress_seconds)
  fds = [os.open(path, os.O_WRONLY) for path in paths]
  try:
    with _mapped_blocks(spool_dir, num_blocks) as spooled:
      for lo in range(0, count, WRITE_BLOCK):
        hi = min(lo + WRITE_BLOCK, count)
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

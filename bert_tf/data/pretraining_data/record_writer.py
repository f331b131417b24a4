"""Writing create_pretraining_data's records: instances serialized straight to the bytes of
tf.train.Example and framed as TFRecords (bert_tf/data/pretraining_data/record_bytes.py), in the output order,
round-robin over the output files; with worker processes, spooled while instances are made and
copied out in parallel (Spool). Each output file appears whole or not at all.

instance_features is the record of one instance as the original builds it: the reference the fast
encoder is tested against. With Options.unmasked (create_pretraining_data.py --unmasked) a record
has no masked_lm_* features (records.unmasked_pretraining_features)."""
import collections
import contextlib
import functools
import mmap
import os
import shutil
import tempfile

import numpy as np

from bert_tf.data.pretraining_data.record_bytes import RecordEncoder
from bert_tf.data.pretraining_data.record_bytes import tfrecord_bytes
from bert_tf.io import fileio
from bert_tf.io.progress import Progress
from bert_tf.io import workers
from bert_tf.model import objectives

# Instances per unit of parallel serialization.
WRITE_BLOCK = 5000

# ----------------------------------------------------------------------------------------------------
# Writing.

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
  if not options.unmasked:
    features[objectives.MASKED_LM_POSITIONS] = positions.tolist() + padding
    features[objectives.MASKED_LM_IDS] = labels.tolist() + padding
    features[objectives.MASKED_LM_WEIGHTS] = [1.0] * num_masked + [0.0] * len(padding)
  features[objectives.NEXT_SENTENCE_LABELS] = [is_random_next]
  return features


def _serialize_block(tokens, instances, output_order, encoder, bounds):
  """The records in output positions [lo, hi), as TFRecord file bytes for each of the `num_files`
  round-robin output files: the j-th holds records lo + j, lo + j + num_files, ..."""
  lo, hi, num_files = bounds
  serialized = encoder.encode_block(tokens, instances, output_order[lo:hi])
  return [tfrecord_bytes(serialized[j::num_files]) for j in range(num_files)]


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
  serialize = functools.partial(_serialize_block, corpus.tokens, instances, output_order,
                                RecordEncoder(vocab, options))
  blocks = _output_blocks(len(output_order), len(output_files))
  return _write_blocks(output_files, zip(blocks, map(serialize, blocks)), len(output_order),
                       progress_seconds)


_SpoolState = collections.namedtuple("_SpoolState", "tokens encoder dir")


def _spool_block(state, index, block):
  """Serializes and frames a block of instances in making order into the spool's file `index`;
  returns each frame's size."""
  serialized = state.encoder.encode_block(state.tokens, block, np.arange(len(block)))
  with open(_spool_path(state, index), "wb") as f:
    f.write(tfrecord_bytes(serialized))
  return np.fromiter(map(len, serialized), np.int64, len(serialized)) + 16  # + TFRecord framing


class Spool:
  """Records serialized by worker processes while instances are still being made.

  Making is one random stream in one process, and the output order is known only at its end (the
  original's final shuffle), so with more than one worker the others serialize and frame each block
  of instances as it is made, in making order, into a temporary file; `write` then copies the frames
  out in output order. Costs disk space the size of the output, in a directory beside it.
  """

  def __init__(self, tokens, encoder, num_processes, output_files):
    first = output_files[0]
    local_dir = None if fileio.is_url(first) else os.path.dirname(os.path.abspath(first))
    # The pid in the name lets a later run of the same output remove it if this one is killed.
    spool_dir = tempfile.mkdtemp(prefix=f".{os.path.basename(first)}.spool-{os.getpid()}-",
                                 dir=local_dir)
    self._state = _SpoolState(tokens, encoder, spool_dir)
    self._workers = workers.ForkedWorkers(num_processes, inherited=self._state)
    self._num_processes = num_processes
    self._pending = []

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self._workers.shutdown()
    shutil.rmtree(self._state.dir, ignore_errors=True)

  def add(self, block):
    # A worker that died on an earlier block breaks the pool: submitting then fails too.
    with workers.if_a_worker_dies("serializing records"):
      self._pending.append(self._workers.submit(_spool_block, len(self._pending), block))

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
      with _mapped_blocks(self._state, num_blocks) as spooled:
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
      with workers.if_a_worker_dies("copying records out"):
        copies = [self._workers.submit(_copy_spooled, num_blocks, [a[lo:hi] for a in frames], lo,
                                       paths, offsets(lo)) for lo, hi in zip(parts[1:-1], parts[2:])]
        written = _copy_spooled(self._state, num_blocks, [a[:parts[1]] for a in frames], 0, paths,
                                offsets(0), progress_seconds, total)
        written += sum(copy.result() for copy in copies)
    return written


def _spool_path(state, index):
  return os.path.join(state.dir, f"{index}.bin")


@contextlib.contextmanager
def _mapped_blocks(state, num_blocks):
  with contextlib.ExitStack() as stack:
    spooled = []
    for i in range(num_blocks):
      f = stack.enter_context(open(_spool_path(state, i), "rb"))
      spooled.append(stack.enter_context(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)))
    yield spooled


def _gathered_frames(spooled, frames, num_files):
  """A run of records as TFRecord bytes per round-robin output file (as _serialize_block gives them):
  frames[0/1/2][i] are the spooled block, begin and end of the run's i-th record."""
  blocks, begins, ends = (a.tolist() for a in frames)
  return [b"".join([spooled[b][begin:end] for b, begin, end in
                    zip(blocks[j::num_files], begins[j::num_files], ends[j::num_files])])
          for j in range(num_files)]


def _copy_spooled(state, num_blocks, frames, first, paths, offsets, progress_seconds=None,
                  total=None):
  """Copies the records at output positions first, first + 1, ... (`frames` as _gathered_frames) into the local
  files `paths` (record k into paths[k % len(paths)]), from byte offsets[f] of each; returns how many."""
  num_files, count = len(paths), len(frames[0])
  offsets = list(offsets)
  progress = Progress("writing", seconds=progress_seconds)
  fds = [os.open(path, os.O_WRONLY) for path in paths]
  try:
    with _mapped_blocks(state, num_blocks) as spooled:
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

"""Records as bytes, without TensorFlow: tf.train.Example serialization of pretraining instances
(RecordEncoder) and TFRecord framing (tfrecord_bytes), both tested against TensorFlow's own
(tf.train.Example.SerializeToString(deterministic=True) and tf.io.TFRecordWriter).

create_pretraining_data does not import TensorFlow (it takes seconds to load), and building protobuf
objects costs ~100 us a record; here blocks of records are encoded with numpy.
"""
import itertools

import numpy as np

from bert_tf.model import objectives


# ----------------------------------------------------------------------------------------------------
# tf.train.Example bytes.


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
    self.weight_entries = [
        self._entry(objectives.MASKED_LM_WEIGHTS, 2, float_one * m + float_zero * (max_predictions - m))
        for m in range(max_predictions + 1)]
    self.label_entries = [self._entry(objectives.NEXT_SENTENCE_LABELS, 3, _varint(label)) for label in (0, 1)]
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
    unmasked = options.unmasked
    serialized = []
    for i, (n, m, la, nsp) in enumerate(zip(length.tolist(), num_masked.tolist(), len_a.tolist(),
                                            is_random_next.tolist())):
      masks = () if unmasked else (
          entry(objectives.MASKED_LM_IDS,
                labels_bytes[labels_bounds[i]:labels_bounds[i + 1]] + zeros[max_predictions - m]),
          entry(objectives.MASKED_LM_POSITIONS,
                positions_bytes[positions_bounds[i]:positions_bounds[i + 1]] + zeros[max_predictions - m]),
          weight_entries[m])
      features = b"".join((
          entry("input_ids", ids_bytes[ids_bounds[i]:ids_bounds[i + 1]] + zeros[max_seq_length - n]),
          mask_entries[n],
          *masks,
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


# ----------------------------------------------------------------------------------------------------
# TFRecord files without TensorFlow: each record is its length (uint64, little-endian), the masked
# CRC-32C of those 8 bytes, the record, and the masked CRC-32C of the record.


def _crc32c_tables():
  table = np.arange(256, dtype=np.uint32)
  for _ in range(8):  # reflected Castagnoli polynomial
    table = np.where(table & 1, (table >> 1) ^ np.uint32(0x82F63B78), table >> 1).astype(np.uint32)

  def four_bytes(state):
    for _ in range(4):
      state = table[state & 0xFF] ^ (state >> 8)
    return state

  # A state word after four zero bytes, from its low and its high 16 bits: one lookup each per 4 bytes.
  halves = np.arange(1 << 16, dtype=np.uint32)
  return table, four_bytes(halves), four_bytes(halves << 16)


_CRC_TABLE, _CRC_LOW, _CRC_HIGH = _crc32c_tables()
# [n]: the CRC register after n zero bytes from all ones, extended as longer records come.
_crc_of_ones = np.array([0xFFFFFFFF], np.uint32)


def _masked_crc32c(rows, lengths):
  """TFRecord's masked CRC-32C of each row of `rows` (uint8 [N, width], width a multiple of 4), whose
  data are its last `lengths` bytes after zeros, computed for all rows at once with numpy.

  The CRC register update is linear: the CRC of data from the initial all-ones register is the CRC of
  the data from zero, xor that of as many zero bytes from all ones; from zero, leading zero bytes
  change nothing.
  """
  state = np.zeros([len(rows)], np.uint32)
  for word in np.ascontiguousarray(rows.view("<u4").T):
    state ^= word
    state = _CRC_LOW[state & 0xFFFF] ^ _CRC_HIGH[state >> 16]
  global _crc_of_ones
  if len(_crc_of_ones) <= rows.shape[1]:
    more = [_crc_of_ones[-1]]
    for _ in range(rows.shape[1] + 1 - len(_crc_of_ones)):
      more.append(_CRC_TABLE[more[-1] & 0xFF] ^ (more[-1] >> 8))
    _crc_of_ones = np.concatenate([_crc_of_ones, np.array(more[1:], np.uint32)])
  crc = state ^ _crc_of_ones[lengths] ^ np.uint32(0xFFFFFFFF)
  return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


def tfrecord_bytes(serialized):
  """The bytes of a TFRecord file holding these serialized records (what tf.io.TFRecordWriter writes).

  Meant for blocks of records of similar lengths, such as pretraining records: each takes a row of
  memory as wide as the longest.
  """
  if not serialized:
    return b""
  lengths = np.fromiter(map(len, serialized), np.int64, len(serialized))
  width = (int(lengths.max()) + 3) // 4 * 4
  # Every record right-aligned in a row of `width` bytes, made by one join.
  pads = [bytes(pad) for pad in (width - lengths).tolist()]
  rows = np.frombuffer(b"".join(itertools.chain.from_iterable(zip(pads, serialized))), np.uint8)
  rows = rows.reshape([len(serialized), width])
  length_rows = lengths.astype("<u8").view(np.uint8).reshape([-1, 8])
  length_crcs = _masked_crc32c(length_rows, np.full_like(lengths, 8)).astype("<u4")
  headers = np.concatenate([length_rows, length_crcs.view(np.uint8).reshape([-1, 4])], axis=1).tobytes()
  footers = _masked_crc32c(rows, lengths).astype("<u4").tobytes()
  return b"".join(itertools.chain.from_iterable(zip(
      [headers[i:i + 12] for i in range(0, len(headers), 12)], serialized,
      [footers[i:i + 4] for i in range(0, len(footers), 4)])))

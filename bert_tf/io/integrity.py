"""Files that a native library reads, checked before it reads them: a native reader trusts its file,
and a cut or flipped one can kill the process with a signal (TensorFlow Lite on a truncated
model.tflite) instead of raising. Each check reads the file in Python and says what is wrong as a
phrase ("cut short: 1,204 of 2,410 bytes"), or None when it finds nothing:

  tflite_damage(data)        a .tflite flatbuffer (bytes or an mmap): its magic and every table,
                             vector and index it holds within the file (TensorFlow Lite's schema)
  bundle_damage(prefix)      a TensorFlow checkpoint (<prefix>.index and its .data shards): the
                             index whole (its blocks' checksums, TensorFlow's table format) and
                             every data shard as long as the index says
  savedmodel_pb_damage(path) a saved_model.pb: not empty, and it starts as a SavedModel proto does
  write_checksums(directory) / checksum_damage(directory)
                             the size and sha256 of every file a directory holds, written when it is
                             made (an export), and checked against what is there later; None for a
                             directory made before (no CHECKSUMS_FILE): its files are then checked
                             by the size and magic checks above alone.

Nothing here imports TensorFlow at import time (a URL is read through tf.io.gfile).
"""
import hashlib
import json
import mmap
import os
import struct

from bert_tf.io import fileio

CHECKSUMS_FILE = os.path.join("assets.extra", "checksums.json")
_TFLITE_MAGIC = b"TFL3"
_TFLITE_SCHEMA_VERSION = 3
_TABLE_MAGIC = 0xdb4775248b80fb57  # the footer of TensorFlow's (LevelDB's) table format
_TABLE_FOOTER = 48
# A SavedModel proto begins with its saved_model_schema_version (field 1, varint) = 1, then its
# first meta graph (field 2).
_SAVED_MODEL_START = b"\x08\x01\x12"


# ---------------------------------------------------------------------------- TensorFlow Lite


def tflite_damage(data):
  """What is wrong with the .tflite bytes `data` (bytes, bytearray or mmap), or None. Reads the
  whole flatbuffer with TensorFlow Lite's own Python schema, in Python, so a cut or flipped file
  raises here (and is named) instead of in the native interpreter."""
  if len(data) < 8:
    return f"{len(data)} bytes, too short for a TensorFlow Lite model"
  if data[4:8] != _TFLITE_MAGIC:
    return f"no {_TFLITE_MAGIC.decode()} mark at byte 4: not a TensorFlow Lite model"
  # pylint: disable=g-import-not-at-top  (TensorFlow's, loaded only where a model is checked)
  from tensorflow.lite.python import schema_py_generated as schema
  try:
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(data, 0))
  except Exception:  # pylint: disable=broad-except  (struct.error, IndexError, ...)
    return "cut short or damaged (its tables point past its end, or hold garbage)"
  if model.version != _TFLITE_SCHEMA_VERSION:
    return f"schema version {model.version}, not {_TFLITE_SCHEMA_VERSION}: damaged"
  return _tflite_indexes_damage(model, len(data))


def _ints(values):
  return [] if values is None else [int(v) for v in values]


def _tflite_indexes_damage(model, size):
  """What index of the model points outside what it holds (a buffer, a tensor, an operator
  code), or None."""
  buffers = model.buffers or []
  for buffer in buffers:
    if buffer.offset and buffer.offset + buffer.size > size:
      return f"a buffer runs past the end ({buffer.offset + buffer.size:,} of {size:,} bytes)"
  codes = len(model.operatorCodes or [])
  for subgraph in model.subgraphs or []:
    tensors = subgraph.tensors or []
    if any(not 0 <= tensor.buffer < len(buffers) for tensor in tensors):
      return "a tensor names a buffer it does not hold: damaged"
    ends = _ints(subgraph.inputs) + _ints(subgraph.outputs)
    for op in subgraph.operators or []:
      if not 0 <= op.opcodeIndex < codes:
        return "an operator names an operator code it does not hold: damaged"
      ends += [i for i in _ints(op.inputs) + _ints(op.outputs) if i != -1]
    if any(not 0 <= i < len(tensors) for i in ends):
      return "an operator names a tensor it does not hold: damaged"
  return None


def tflite_file_damage(path):
  """tflite_damage of the file at path (mapped, not read into memory), or "not found"."""
  if fileio.is_url(path):
    with fileio.open_file(path, "rb") as f:
      return tflite_damage(f.read())
  try:
    with open(path, "rb") as f:
      if os.fstat(f.fileno()).st_size == 0:
        return tflite_damage(b"")
      with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return tflite_damage(data)
  except FileNotFoundError:
    return "not found"


# ---------------------------------------------------------------------------- checkpoints


def _varint(data, pos):
  result = shift = 0
  while True:
    if pos >= len(data):
      raise ValueError("a number runs past the end")
    byte = data[pos]
    pos += 1
    result |= (byte & 0x7F) << shift
    if not byte & 0x80:
      return result, pos
    shift += 7
    if shift > 63:
      raise ValueError("a number too long")


def _proto_fields(data):
  """{field number: last varint value} of a serialized proto's varint fields."""
  fields, pos = {}, 0
  while pos < len(data):
    key, pos = _varint(data, pos)
    wire = key & 7
    if wire == 0:
      fields[key >> 3], pos = _varint(data, pos)
      continue
    if wire == 2:
      length, pos = _varint(data, pos)
      pos += length
    elif wire in (1, 5):
      pos += 8 if wire == 1 else 4
    else:
      raise ValueError(f"wire type {wire}")
    if pos > len(data):
      raise ValueError("a field runs past the end")
  return fields


def _crc32c_table():
  table = []
  for i in range(256):
    crc = i
    for _ in range(8):
      crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    table.append(crc)
  return table


_CRC32C = _crc32c_table()


def _masked_crc32c(data):
  """The masked CRC-32C of TensorFlow's table format (LevelDB's)."""
  crc, table = 0xFFFFFFFF, _CRC32C
  for byte in data:
    crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
  crc ^= 0xFFFFFFFF
  return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class _Compressed(Exception):
  """A table block compressed (snappy): not read here."""


def _block(data, handle):
  offset, size = handle
  if offset + size + 5 > len(data):
    raise ValueError("a block runs past the end")
  kind = data[offset + size]
  if kind != 0:
    raise _Compressed()
  stored = struct.unpack_from("<I", data, offset + size + 1)[0]
  if _masked_crc32c(data[offset:offset + size + 1]) != stored:
    raise ValueError("a block's checksum does not match")
  return data[offset:offset + size]


def _block_entries(block):
  """(key, value) of a table block (keys prefix-compressed, as LevelDB's)."""
  if len(block) < 4:
    raise ValueError("a block too short")
  restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
  end = len(block) - 4 - 4 * restarts
  if end < 0:
    raise ValueError("a block's restart points")
  pos, key = 0, b""
  while pos < end:
    shared, pos = _varint(block, pos)
    unshared, pos = _varint(block, pos)
    length, pos = _varint(block, pos)
    if shared > len(key) or pos + unshared + length > end:
      raise ValueError("an entry runs past its block")
    key = key[:shared] + block[pos:pos + unshared]
    pos += unshared
    yield key, block[pos:pos + length]
    pos += length


def _table_entries(data):
  """{key: value} of a TensorFlow table file (a checkpoint's .index)."""
  if len(data) < _TABLE_FOOTER:
    raise ValueError(f"{len(data)} bytes, shorter than a table's footer")
  if struct.unpack_from("<Q", data, len(data) - 8)[0] != _TABLE_MAGIC:
    raise ValueError("no table mark at its end: cut short or not a checkpoint index")
  pos = len(data) - _TABLE_FOOTER
  for _ in range(2):  # the metaindex handle, unused
    _, pos = _varint(data, pos)
  index_offset, pos = _varint(data, pos)
  index_size, pos = _varint(data, pos)
  entries = {}
  for _, handle in _block_entries(_block(data, (index_offset, index_size))):
    offset, at = _varint(handle, 0)
    size, _ = _varint(handle, at)
    entries.update(_block_entries(_block(data, (offset, size))))
  return entries


_bundle_checks = {}


def _stat(path):
  """(size, modification time in ns) of a file; OSError when it is not there."""
  if fileio.is_url(path):
    try:
      stat = fileio.tf.io.gfile.stat(path)
    except fileio.tf.errors.OpError as e:
      raise OSError(f"{path}: {e.message}") from None
    return stat.length, stat.mtime_nsec
  stat = os.stat(path)
  return stat.st_size, stat.st_mtime_ns


def bundle_damage(prefix):
  """What is wrong with the checkpoint `prefix` (a whole set of files, as tf_checkpoint lists them),
  or None: its .index unreadable (cut short, a block's checksum wrong), or a .data shard shorter
  than the index says (cut short). The tensors' own checksums are TensorFlow's, checked when it
  restores them. An index of compressed blocks is not read here (None)."""
  index = prefix + ".index"
  try:
    key = (index, _stat(index))
  except OSError:
    return "no .index file"
  if key not in _bundle_checks:
    _bundle_checks[key] = _read_bundle(prefix)
  needed = _bundle_checks[key]
  if isinstance(needed, str):
    return needed
  for name, end in sorted(needed.items()):
    try:
      size = _stat(f"{prefix}.{name}")[0]
    except OSError:
      return f"no .{name} file"
    if size < end:
      return f".{name} is cut short ({size:,} of {end:,} bytes)"
  return None


def _read_bundle(prefix):
  """{data file suffix: the bytes its index says it holds}, or what is wrong with the index."""
  with fileio.open_file(prefix + ".index", "rb") as f:
    data = f.read()
  try:
    entries = _table_entries(data)
    shards = _proto_fields(entries.get(b"", b"")).get(1, 1)  # BundleHeaderProto.num_shards
    ends = {}
    for name, value in entries.items():
      if name:
        fields = _proto_fields(value)  # BundleEntryProto: shard_id 3, offset 4, size 5
        shard = fields.get(3, 0)
        ends[shard] = max(ends.get(shard, 0), fields.get(4, 0) + fields.get(5, 0))
  except _Compressed:
    return {}
  except ValueError as e:
    return f"its .index cannot be read ({e})"
  return {f"data-{shard:05d}-of-{shards:05d}": end for shard, end in ends.items()}


# ---------------------------------------------------------------------------- SavedModels


def savedmodel_pb_damage(path):
  """What is wrong with a saved_model.pb at first sight (empty, or not the start of a SavedModel
  proto), or None; a cut one fails TensorFlow's parse, in Python."""
  with fileio.open_file(path, "rb") as f:
    head = f.read(len(_SAVED_MODEL_START))
  if not head:
    return "saved_model.pb is empty"
  if head != _SAVED_MODEL_START:
    return "saved_model.pb does not start as a SavedModel: damaged"
  return None


# ---------------------------------------------------------------------------- checksums


def _files(directory):
  """The relative paths of every file under directory, sorted."""
  if fileio.is_url(directory):
    walked = ((parent, names) for parent, _, names in fileio.tf.io.gfile.walk(directory))
  else:
    walked = ((parent, names) for parent, _, names in os.walk(directory))
  return sorted(os.path.relpath(os.path.join(parent, name), directory)
                for parent, names in walked for name in names)


def file_digest(path):
  """(size in bytes, sha256 hex digest) of a file."""
  digest, size = hashlib.sha256(), 0
  with fileio.open_file(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 22), b""):
      digest.update(block)
      size += len(block)
  return size, digest.hexdigest()


def write_checksums(directory):
  """Writes CHECKSUMS_FILE in directory: the size and sha256 of every file there (written last,
  once the directory is complete, before it is published)."""
  files = {}
  for name in _files(directory):
    size, sha256 = file_digest(os.path.join(directory, name))
    files[name] = {"bytes": size, "sha256": sha256}
  path = os.path.join(directory, CHECKSUMS_FILE)
  if not fileio.is_url(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
  with fileio.open_file(path, "w") as f:
    f.write(json.dumps({"files": files}, indent=1, sort_keys=True) + "\n")


_checked = {}


def checksum_damage(directory, select=None):
  """What differs in directory from its CHECKSUMS_FILE (a file missing, of another size, or of
  another sha256), or None: also None when it has no such file (made before they were written).
  select(relative path): whether to check that file (default: every one)."""
  path = os.path.join(directory, CHECKSUMS_FILE)
  if not fileio.exists(path):
    return None
  try:
    with fileio.open_file(path, "rb") as f:
      files = json.loads(f.read().decode("utf-8"))["files"]
    listed = {name: (int(entry["bytes"]), str(entry["sha256"])) for name, entry in files.items()}
  except (ValueError, KeyError, TypeError, AttributeError):
    return f"{CHECKSUMS_FILE} cannot be read: damaged"
  for name, (size, sha256) in sorted(listed.items()):
    if select is not None and not select(name):
      continue
    damage = _file_damage(os.path.join(directory, name), size, sha256)
    if damage:
      return f"{name} {damage}"
  return None


def _file_damage(path, size, sha256):
  try:
    stat = _stat(path)
  except OSError:
    return "is missing"
  if stat[0] != size:
    return f"is {stat[0]:,} bytes, not the {size:,} it was written with: cut short or changed"
  key = (path, stat)
  if key not in _checked:
    _checked[key] = file_digest(path)[1]
  if _checked[key] != sha256:
    return "differs from what was written (its sha256): damaged"
  return None

"""The safetensors file format (Hugging Face's weights files): numpy arrays, any tf.io.gfile path.

  read_safetensors(path) -> {name: numpy array} (bfloat16 widened to float32)
  write_safetensors(path, tensors, metadata=None)   atomically; names sorted, data 8-byte aligned
"""
import json
import struct

import numpy as np
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.io.fileio import atomic_output

# safetensors is a JSON header (8-byte little-endian length first) followed by raw little-endian
# tensors; reading and writing it needs nothing beyond numpy.

_SAFETENSORS_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16,
                       "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
                       "U8": np.uint8, "BOOL": np.bool_}


def read_safetensors(path):
  """dict name -> numpy array (bfloat16 is widened to float32)."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  try:
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + header_size])
  except (struct.error, ValueError):
    raise BertTfError(f"{path}: not a safetensors file") from None
  body = memoryview(data)[8 + header_size:]
  tensors = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    begin, end = info["data_offsets"]
    dtype = info["dtype"]
    if dtype == "BF16":
      bits = np.frombuffer(body[begin:end], dtype="<u2").astype(np.uint32) << 16
      array = bits.view(np.float32)
    elif dtype in _SAFETENSORS_DTYPES:
      little_endian = np.dtype(_SAFETENSORS_DTYPES[dtype]).newbyteorder("<")
      array = np.frombuffer(body[begin:end], dtype=little_endian)
    else:
      raise BertTfError(f"{path}: tensor {name} has unsupported dtype {dtype}")
    tensors[name] = array.reshape(info["shape"])
  return tensors


def write_safetensors(path, tensors, metadata=None):
  """Writes dict name -> numpy array (float32/float16/int) as safetensors, atomically."""
  codes = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}
  header = {"__metadata__": dict(metadata or {"format": "pt"})}
  offset = 0
  blobs = []
  for name in sorted(tensors):
    array = np.ascontiguousarray(tensors[name])
    blob = array.astype(array.dtype.newbyteorder("<")).tobytes()
    header[name] = {"dtype": codes[array.dtype], "shape": list(array.shape),
                    "data_offsets": [offset, offset + len(blob)]}
    blobs.append(blob)
    offset += len(blob)
  header_bytes = json.dumps(header, separators=(",", ":")).encode("utf-8")
  header_bytes += b" " * (-len(header_bytes) % 8)  # Keeps tensor data 8-byte aligned.
  with atomic_output(path) as tmp:
    with tf.io.gfile.GFile(tmp, "wb") as f:
      f.write(struct.pack("<Q", len(header_bytes)))
      f.write(header_bytes)
      for blob in blobs:
        f.write(blob)

"""Files on local disk or behind a URL (gs://, hdfs://, ...), and output that appears whole or not at all.

Local paths use Python's own I/O; only a URL imports TensorFlow for tf.io.gfile. create_pretraining_data
runs without TensorFlow this way: importing it takes longer than making a small corpus's records.

Inputs are read through open_input / read_text: gzip, bzip2 and xz are decompressed (told by their
first bytes), text must be UTF-8, and a missing file, a directory, a zip archive or UTF-16 text is a
one-line error. Outputs are checked against inputs (check_not_input) before a run starts, and a full
disk while writing one is a one-line error naming it (atomic_output).
"""
import bz2
import contextlib
import errno
import fnmatch
import glob as _glob
import gzip
import io
import lzma
import os
import re
import shutil
import socket
import threading
import zlib

from bert_tf.errors import BertTfError


def is_url(path):
  return "://" in path


# Hosts each URL scheme needs; checked once, fast, before TensorFlow's client retries for seconds.
_URL_HOSTS = {"gs": "www.googleapis.com"}
# Set, they route or redirect the traffic (a proxy, an emulator): the host check would not apply.
_ROUTING_VARIABLES = ("https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                      "STORAGE_EMULATOR_HOST", "CLOUD_STORAGE_EMULATOR_ENDPOINT")
_reachable = {}


def check_reachable(url, flag, timeout=5.0):
  """Raises BertTfError naming `flag` and `url` when the host that a gs:// path needs does not
  resolve within `timeout` seconds (no network): TensorFlow's own client would retry for 15 s and
  more, and its error names neither. Other schemes, proxies and emulators are not checked."""
  host = _URL_HOSTS.get(url.partition("://")[0])
  if host is None or any(os.environ.get(name) for name in _ROUTING_VARIABLES):
    return
  if host not in _reachable:
    result = []
    resolver = threading.Thread(target=lambda: result.append(_resolves(host)), daemon=True)
    resolver.start()
    resolver.join(timeout)
    _reachable[host] = result[0] if result else f"no answer in {timeout:g} s"
  if _reachable[host] is not True:
    raise BertTfError(f"{flag}: {url}: cannot reach Google Cloud Storage ({host}: "
                      f"{_reachable[host]}; no network?); expected a reachable gs:// path or a "
                      f"local one")


def _resolves(host):
  try:
    socket.getaddrinfo(host, 443)
    return True
  except OSError as e:
    return str(e.strerror or e)


class TensorFlowOnFirstUse:
  """`tensorflow`, imported when an attribute is first used (here and in records.py)."""

  def __getattr__(self, name):
    import tensorflow  # pylint: disable=g-import-not-at-top
    return getattr(tensorflow, name)


tf = TensorFlowOnFirstUse()


def exists(path):
  return tf.io.gfile.exists(path) if is_url(path) else os.path.exists(path)


def glob(pattern):
  return tf.io.gfile.glob(pattern) if is_url(pattern) else _glob.glob(pattern)


def remove(path):
  if is_url(path):
    tf.io.gfile.remove(path)
  else:
    os.remove(path)


def rename(src, dst):
  """Replaces dst if it exists."""
  if is_url(src) or is_url(dst):
    tf.io.gfile.rename(src, dst, overwrite=True)
  else:
    os.replace(src, dst)


def open_file(path, mode="r"):
  """open(path, mode), or tf.io.gfile.GFile for a URL."""
  if is_url(path):
    return tf.io.gfile.GFile(path, mode)
  return open(path, mode, encoding=None if "b" in mode else "utf-8")


def read_lines(path, flag=None):
  """The lines of a UTF-8 text file as the original release read them (iterating a tf.gfile):
  split after each "\n" only, never on the other characters str.splitlines() takes for line
  ends (U+2028, U+0085, \x0b, \x1c ...), with every "\r" dropped, as TensorFlow's line reader
  drops them. A byte order mark at the start is dropped too; gzip, bzip2 and xz files are read
  decompressed (read_text)."""
  text = read_text(path, flag)
  return io.StringIO(text.replace("\r", ""), newline="\n").readlines()


# ----------------------------------------------------------------------------------------------
# Reading: compressed files, encodings, and paths that are not readable files.

# How a file starts -> its compression (told by its bytes, whatever its name).
_MAGIC = ((b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"PK\x03\x04", "zip"),
          (b"PK\x05\x06", "zip"))
_DECOMPRESSORS = {"gzip": lambda raw: gzip.GzipFile(fileobj=raw, mode="rb"), "bzip2": bz2.BZ2File,
                  "xz": lzma.LZMAFile}
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _where(path, flag):
  return f"{flag}: {path}" if flag else path


def check_input_file(path, flag=None):
  """Raises BertTfError unless `path` is a readable file (not a directory, not missing)."""
  where = _where(path, flag)
  if is_url(path):
    if not exists(path):
      raise BertTfError(f"{where}: file not found")
    return
  if os.path.isdir(path):
    raise BertTfError(f"{where}: is a directory; expected a file")
  if not os.path.exists(path):
    raise BertTfError(f"{where}: file not found")
  if not os.access(path, os.R_OK):
    raise BertTfError(f"{where}: permission denied; expected a file this user can read")


def check_data_directory(path, flag="--data_dir"):
  """Raises BertTfError when a task's data directory is a file (a missing one is named with the
  file the task reads first)."""
  if path and exists(path) and not (tf.io.gfile.isdir if is_url(path) else os.path.isdir)(path):
    raise BertTfError(f"{flag}: {path} is a file, not a directory (expected the directory that "
                      f"holds the task's train, dev and test files)")


def check_output_directory(path, flag):
  """Raises BertTfError when `path` exists and is not a directory: a run names it before it
  starts, not when it first writes there."""
  isdir = tf.io.gfile.isdir if is_url(path) else os.path.isdir
  if exists(path) and not isdir(path):
    raise BertTfError(f"{flag}: {path} is a file, not a directory")


class _Decompressed:
  """A binary reader of a compressed file: read() gives the decompressed bytes; a damaged or
  truncated file is a BertTfError naming it. Closing it closes the file under it."""

  def __init__(self, raw, kind, where):
    self._raw, self._kind, self._where = raw, kind, where
    self._stream = _DECOMPRESSORS[kind](raw)

  def read(self, size=-1):
    try:
      return self._stream.read(size)
    except (EOFError, OSError, lzma.LZMAError, zlib.error) as e:
      raise BertTfError(f"{self._where}: a damaged or truncated {self._kind} file ({e}); expected "
                        f"a whole {self._kind} file or plain text") from None

  def close(self):
    try:
      self._stream.close()
    finally:
      self._raw.close()

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    self.close()


class _HeadFirst:
  """A binary reader that gives `head` (bytes already read from `raw`) and then the rest of raw:
  what the compression sniffing read is not read again, and raw need not seek back (a pipe, as
  `--input_file=<(zcat corpus.gz)` gives, cannot)."""

  def __init__(self, head, raw):
    self._head, self._raw = head, raw

  def read(self, size=-1):
    if not self._head:
      return self._raw.read(size)
    if size is None or size < 0:
      data, self._head = self._head + self._raw.read(), b""
      return data
    data, self._head = self._head[:size], self._head[size:]
    if len(data) < size:
      data += self._raw.read(size - len(data))
    return data

  def readable(self):
    return True

  def close(self):
    self._raw.close()

  def __enter__(self):
    return self

  def __exit__(self, *unused):
    self.close()


def open_input(path, flag=None):
  """A binary reader of an input file: gzip, bzip2 and xz files (told by their first bytes, not
  their name, without seeking: a pipe or process substitution reads as a file) are decompressed
  as they are read; a zip archive is refused (it holds files, not one text). One-line errors for
  a missing file, a directory, an unreadable file."""
  check_input_file(path, flag)
  raw = tf.io.gfile.GFile(path, "rb") if is_url(path) else open(path, "rb")
  try:
    head = raw.read(6)
  except BaseException:
    raw.close()
    raise
  raw = _HeadFirst(head, raw)
  kind = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
  if kind is None:
    return raw
  if kind == "zip":
    raw.close()
    raise BertTfError(f"{_where(path, flag)}: a zip archive; expected a text file (unzip it, or "
                      f"compress it with gzip, bzip2 or xz: those are read as they are)")
  return _Decompressed(raw, kind, _where(path, flag))


def refuse_utf16(head, path, flag=None):
  """Raises BertTfError when bytes that start a file start as UTF-16 text does (its byte order
  mark): read as UTF-8 it would be garbage, not an error."""
  if head.startswith(_UTF16_BOMS):
    raise BertTfError(f"{_where(path, flag)}: UTF-16 text (it starts with a UTF-16 byte order "
                      f"mark); expected UTF-8 (convert it, e.g. iconv -f UTF-16 -t UTF-8)")


def decode_text(data, path, flag=None):
  """The text of a file's bytes, which must be UTF-8: a UTF-8 byte order mark at the start is
  dropped (the original's tokenizer drops U+FEFF as a control character, so ids are the same);
  UTF-16 or any invalid byte is a BertTfError naming the file, the line and the byte."""
  refuse_utf16(data, path, flag)
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise not_utf8(path, flag, data, e.start) from None
  return text[1:] if text.startswith("\ufeff") else text


def _place(data, position, lines_before=0, bytes_before=0):
  """`line L, byte B is 0xXX` of the byte at `position` of data, a block of a file that starts
  after lines_before lines and bytes_before bytes."""
  line = lines_before + data.count(b"\n", 0, position) + 1
  return f"line {line}, byte {bytes_before + position} is {data[position]:#04x}"


def not_utf8(path, flag, data, position, lines_before=0, bytes_before=0):
  """The BertTfError of a file that is not UTF-8 text: its file, line and byte."""
  return BertTfError(f"{_where(path, flag)}: not UTF-8 "
                     f"({_place(data, position, lines_before, bytes_before)}); expected UTF-8 text")


def read_bytes(path, flag=None):
  """The (decompressed) bytes of an input file: open_input."""
  with open_input(path, flag) as f:
    return f.read()


def read_text(path, flag=None):
  """The text of a UTF-8 (or gzip/bzip2/xz-compressed UTF-8) file: decode_text(read_bytes)."""
  return decode_text(read_bytes(path, flag), path, flag)


def temporary_name(path):
  return f"{path}.tmp-{os.getpid()}"


_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
_DISK_FULL_TEXTS = ("No space left on device", "File too large", "Disk quota exceeded")


def is_disk_full(error):
  """Whether an exception (OSError, or TensorFlow's error of a file write) says the disk is full or
  the file grew past a size limit (ENOSPC, EFBIG, EDQUOT)."""
  if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
    return True
  text = getattr(error, "message", None) or (str(error) if not isinstance(error, OSError) else "")
  return any(phrase in str(text) for phrase in _DISK_FULL_TEXTS)


def disk_full_error(where):
  return BertTfError(f"{where}: no space left on device (the disk is full, or the file passed a "
                     f"size limit); expected room to write it: free space or write elsewhere")


@contextlib.contextmanager
def atomic_output(path):
  """Yields a temporary path to write; renames it to `path` only if the block succeeds. The
  temporary file is removed whatever fails, the rename included; a full disk is a BertTfError
  naming `path`."""
  check_output_file(path)
  tmp = temporary_name(path)
  try:
    yield tmp
    rename(tmp, path)
  except BaseException as e:
    if exists(tmp):
      remove(tmp)
    if isinstance(e, Exception) and not isinstance(e, BertTfError) and is_disk_full(e):
      raise disk_full_error(path) from None
    raise


# ----------------------------------------------------------------------------------------------
# Outputs that would replace inputs.


def check_output_file(path, flag=None):
  """Raises BertTfError when the path of an output file is a directory."""
  if not is_url(path) and os.path.isdir(path):
    raise BertTfError(f"{_where(path, flag)}: is a directory; expected the path of a file")


def _has_glob(pattern):
  return re.search(r"[*?[]", pattern) is not None


def _same_file(a, b):
  """The same file: equal paths, or (local) one real path, or one inode (a hard link)."""
  if is_url(a) or is_url(b):
    return a.rstrip("/") == b.rstrip("/")
  if os.path.realpath(a) == os.path.realpath(b):
    return True
  try:
    return os.path.samefile(a, b)
  except OSError:
    return False


def check_not_input(output, inputs, flag):
  """Raises BertTfError when writing the file `output` (given by `flag`) would replace an input,
  or a rerun would read it as one: the same path, a symlink or hard link to an input file, or a
  name one of the input globs matches. `inputs`: (flag, comma-separated paths or globs) pairs; an
  empty value is skipped."""
  for input_flag, patterns in inputs:
    for pattern in (p.strip() for p in (patterns or "").split(",")):
      if not pattern:
        continue
      for path in glob(pattern) if _has_glob(pattern) else [pattern]:
        if _same_file(output, path):
          same = "is" if output == path else f"is the same file as {path}, of"
          raise BertTfError(f"{flag}: {output} {same} {input_flag}; expected a new file (writing "
                            f"it would replace an input)")
      if _has_glob(pattern) and (fnmatch.fnmatch(output, pattern) or fnmatch.fnmatch(
          os.path.abspath(output), os.path.abspath(pattern))):
        raise BertTfError(f"{flag}: {output} matches {input_flag}={pattern}; expected a path "
                          f"outside the input files (a rerun would read the output as input)")


def check_dir_not_input(output_dir, names, inputs, flag="--output_dir"):
  """check_not_input for each file `names` a run writes into `output_dir` (--output_dir may be
  the data directory: only a file the run would replace is refused)."""
  for name in names:
    check_not_input(os.path.join(output_dir, name), inputs, flag)


def check_checkpoint_not_input(output, inputs, flag="--output"):
  """check_not_input for a checkpoint written at `output`: a prefix (its .index and .data files),
  a directory (its model.safetensors) or a .safetensors file; `inputs` as check_not_input's, a
  checkpoint among them (--input, --init_checkpoint) given as its prefix, directory or file."""
  check_not_input(output, inputs, flag)
  for input_flag, path in inputs:
    if not path or "," in path:
      continue
    for written, read in ((f"{output}.index", f"{path}.index"),
                          (output, os.path.join(path, "model.safetensors")),
                          (os.path.join(output, "model.safetensors"), path),
                          (os.path.join(output, "model.safetensors"),
                           os.path.join(path, "model.safetensors"))):
      if _same_file(written, read):
        raise BertTfError(f"{flag}: {output} would write over {input_flag}={path}; expected "
                          f"another path for the converted checkpoint")


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def remove_stale_temporaries(path):
  """Removes what earlier runs writing `path` left behind when killed: `path`.tmp-<pid> files and
  `.<name>.spool-<pid>-*` directories beside it, of processes that no longer run. Returns the
  paths removed. (Local paths only; nothing else is touched.)"""
  if is_url(path):
    return []
  directory, name = os.path.split(os.path.abspath(path))
  return remove_dead_temporaries(directory, re.escape(name) + r"\.tmp-(\d+)|\." +
                                 re.escape(name) + r"\.spool-(\d+)-\w+")


def remove_dead_temporaries(directory, pattern):
  """Removes the entries of `directory` whose names match `pattern` (a regular expression whose
  first group that matches is the pid of the process that wrote the entry) when that process no
  longer runs: what killed runs left. Returns the paths removed. Local directories only."""
  if is_url(directory) or not os.path.isdir(directory):
    return []
  pattern = re.compile(f"(?:{pattern})$")
  removed = []
  for entry in os.listdir(directory):
    match = pattern.match(entry)
    if not match or _pid_alive(int(next(pid for pid in match.groups() if pid))):
      continue
    stale = os.path.join(directory, entry)
    if os.path.isdir(stale) and not os.path.islink(stale):
      shutil.rmtree(stale, ignore_errors=True)
    else:
      os.remove(stale)
    removed.append(stale)
  return removed


def rename_to_free_number(tmp, directory, first):
  """Renames the finished directory `tmp` to directory/<n>, n the first number from `first` on
  that no entry there has yet, and returns that path. Never over an entry: two processes that
  publish at once get two numbers (locally a rename onto a directory another process made first
  fails, and the later one takes the next number; on a URL's file system, where a rename is a
  copy, the check comes first)."""
  number = first
  while True:
    final = os.path.join(directory, str(number))
    if is_url(final):
      if not tf.io.gfile.exists(final):
        tf.io.gfile.rename(tmp, final, overwrite=False)
        return final
    elif not os.path.lexists(final):
      try:
        os.rename(tmp, final)  # onto a directory of files: ENOTEMPTY or EEXIST, nothing moved
        return final
      except OSError as e:
        if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
          raise
    number += 1


def write_text_atomically(path, text):
  with atomic_output(path) as tmp:
    with open_file(tmp, "w") as writer:
      writer.write(text)


def input_files(patterns, flag_name="--input_file"):
  """Comma-separated globs -> sorted file list; a glob that matches nothing is an error."""
  files = []
  for pattern in [p for p in patterns.split(",") if p.strip()]:
    matched = sorted(glob(pattern.strip()))
    if not matched:
      raise BertTfError(f"{flag_name}: {pattern.strip()!r} matches no file")
    files.extend(matched)
  if not files:
    raise BertTfError(f"{flag_name}: no input file given")
  return files


# Text read in blocks of about this size; one block of whole lines is one unit of parallel work.
CHUNK_BYTES = 1 << 20


def line_chunks(path, flag="--input_file"):
  """Blocks of whole lines of a corpus, as bytes (the last may lack a final newline); a gzip, bzip2
  or xz file gives the lines it holds. The corpora's UTF-8 rule (check_corpus_text): a line's
  stray invalid bytes are dropped later (decode_lines, as the original), a file that is not text
  at all is a one-line error naming its line and byte, as UTF-16 text is."""
  with open_input(path, flag) as reader:
    rest = b""
    first = True
    where = [0, 0, False]  # lines and bytes before the block; whether a bad byte was warned of
    while True:
      block = reader.read(CHUNK_BYTES)
      if not block:
        break
      if first:
        refuse_utf16(block, path, flag)
        first = False
      block = rest + block
      cut = block.rfind(b"\n") + 1
      if cut == 0:  # no newline yet: a line longer than a block
        rest = block
        continue
      rest = block[cut:]
      yield check_corpus_text(block[:cut], path, flag, where)
    if rest:
      yield check_corpus_text(rest, path, flag, where)


# Past this share of bytes that are not UTF-8 or NUL, a corpus block is not text.
_MAX_INVALID_SHARE = 0.1


def check_corpus_text(block, path, flag, where):
  """Returns a block of a corpus's lines, checked: one where more than a tenth of the bytes are
  not UTF-8 or NUL (a binary file, or text in another encoding) is a BertTfError naming the file,
  line and byte; fewer invalid bytes are dropped by decode_lines (as the original's
  convert_to_unicode; its tokenizer drops NUL), the first of a file named in a warning. where:
  [lines, bytes] of the file before the block and whether that warning was given, updated."""
  lines_before, bytes_before, warned = where
  where[0] += block.count(b"\n")
  where[1] += len(block)
  if block.isascii() and b"\x00" not in block:
    return block
  try:
    block.decode("utf-8")
    first = None
  except UnicodeDecodeError as e:
    first = e.start
  nuls = block.count(b"\x00")
  invalid = 0 if first is None else len(block) - len(block.decode("utf-8", "ignore").encode())
  if invalid + nuls > _MAX_INVALID_SHARE * len(block):
    nul = block.find(b"\x00")
    first = nul if first is None or 0 <= nul < first else first
    raise not_utf8(path, flag, block, first, lines_before, bytes_before)
  if first is None:
    return block
  if not warned:
    where[2] = True
    from absl import logging  # pylint: disable=g-import-not-at-top
    logging.warning("%s: not UTF-8 at %s: such bytes are dropped from their lines, as the "
                    "original does", _where(path, flag),
                    _place(block, first, lines_before, bytes_before))
  return block


def decode_lines(chunk):
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

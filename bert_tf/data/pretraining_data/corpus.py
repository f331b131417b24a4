"""Reading and tokenizing create_pretraining_data's corpus: the original's reading loop (a line at a
time, a blank line ends a document), run over blocks of lines in worker processes, giving token ids
in one numpy array with sentence and document offsets."""
import collections
import contextlib
from array import array

import numpy as np
from absl import logging

from bert_tf.io import fileio
from bert_tf.io.progress import Progress
from bert_tf.io import workers
from bert_tf.text import tokenization



# ----------------------------------------------------------------------------------------------------
# Reading and tokenizing.

def tokenize_chunk(tokenizer, chunk):
  """The original's reading loop on a block of lines: each line stripped, a blank line ending a
  document, a line's tokens kept when it has any. Returns (ids, events, bad_lines, num_bytes):
  `events` holds, per line in order, the number of tokens of a line that has any, and -1 for a blank
  line (which starts a new document)."""
  text, bad_lines = fileio.decode_lines(chunk)
  lines = text.split("\n")
  if lines and not lines[-1]:
    lines.pop()  # the newline ending the chunk's last line
  ids = array("i")
  events = array("i")
  tokenize_to_ids = tokenizer.tokenize_to_ids
  for line in lines:
    line = line.strip()
    if not line:
      events.append(-1)
      continue
    line_ids = tokenize_to_ids(line)
    if line_ids:
      ids.extend(line_ids)
      events.append(len(line_ids))
  return (np.frombuffer(ids, dtype=np.int32), np.frombuffer(events, dtype=np.int32), bad_lines,
          len(chunk))


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
  id_dtype = np.uint16 if tokenization.vocab_size(tokenizer.vocab) <= (1 << 16) else np.int32
  id_parts, event_parts = [], []
  stats = collections.Counter()
  progress = Progress("reading", seconds=progress_seconds)

  def chunks():
    for path in input_files:
      yield from fileio.line_chunks(path)

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

  # The tokenizer builds its character tables on first use (~2 s): once here, not once per worker.
  tokenizer.tokenize("warm-up")
  if num_workers > 1:
    with contextlib.closing(workers.in_order_in_workers(
        tokenize_chunk, chunks(), num_workers, "tokenizing the input", inherited=tokenizer)) as results:
      for result in results:
        take(result)
  else:
    for chunk in chunks():
      take(tokenize_chunk(tokenizer, chunk))
  progress.close()

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

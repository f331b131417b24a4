"""create_pretraining_data.py's run: read and tokenize the corpus (bert_tf/data/pretraining_data/corpus.py), make
the instances as the original does (bert_tf/data/pretraining_data/algorithm.py), write the records
(bert_tf/data/pretraining_data/record_writer.py); over shards of a corpus too large for one process, or with
Apache Beam (bert_tf/data/pretraining_data/beam.py).

TensorFlow is not imported (it takes seconds to load): files are read and written with Python's I/O
(tf.io.gfile only for gs:// and other URLs). With num_workers > 1, reading and tokenizing run in
that many processes over blocks of lines, and the others serialize each block of instances while the
next ones are made (record_writer.Spool). All instances are held until the final shuffle, as
in the original; to bound memory on a very large corpus, split it into shards (run_shards).
"""
import collections
import dataclasses
import hashlib
import os
import random
import time
from typing import Optional

from absl import logging

from bert_tf.data.pretraining_data.algorithm import InstanceMaker
from bert_tf.data.pretraining_data.algorithm import Options
from bert_tf.data.pretraining_data.algorithm import Vocab
from bert_tf.data.pretraining_data.corpus import read_corpus
from bert_tf.data.pretraining_data.record_writer import RecordEncoder
from bert_tf.data.pretraining_data.record_writer import Spool
from bert_tf.data.pretraining_data.record_writer import write_instances
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io.progress import format_duration
from bert_tf.io.progress import summary
from bert_tf.options import MODEL
from bert_tf.options import OUTPUT
from bert_tf.options import RUNTIME
from bert_tf.options import option
from bert_tf.text import tokenization


@dataclasses.dataclass(frozen=True)
class DataOptions:
  """create_pretraining_data.py's flags: its files and how the run is split, beside `instances`,
  the Options of the instances themselves (checked as they are made)."""
  LACKS = ("dynamic_masking",)  # the records are masked here, or not at all (--unmasked)

  input_file: Optional[str] = option(None, "Input raw text file (or comma-separated list of "
                                     "files).")
  output_file: Optional[str] = option(None, "Output TF example file (or comma-separated list of "
                                      "files).", OUTPUT)
  vocab_file: Optional[str] = option(None, "The vocabulary file that the BERT model was trained "
                                     "on.", MODEL)
  instances: Options = Options()
  do_lower_case: bool = option(True, "Whether to lower case the input text. Should be True for "
                               "uncased models and False for cased models.", MODEL)
  num_workers: int = option(
      1, "Processes that read, tokenize and serialize in parallel; with more than one, records "
      "are serialized while instances are made and spooled beside the output (disk space the "
      "size of the output). The output does not depend on it.", RUNTIME)
  num_shards: int = option(1, "Split the input files into this many shards, each with its own "
                           "seed and output files named <output_file>-<shard>-of-<num_shards>.")
  shard_index: Optional[int] = option(
      None, "The shard to make, in [0, num_shards). Default with --num_shards > 1: every shard "
      "whose output files do not exist yet.")
  beam_runner: Optional[str] = option(
      None, "Make the --num_shards shards with this Apache Beam runner (DirectRunner, "
      "DataflowRunner, FlinkRunner, ...) instead of in this process; the files are the same. "
      "Needs apache-beam.", RUNTIME)
  beam_pipeline_options: str = option(
      "", "Beam pipeline options for --beam_runner, space-separated (shell quoting), e.g. "
      "\"--project=P --region=R --temp_location=gs://B/tmp --setup_file=./pyproject.toml\" for "
      "Dataflow.", RUNTIME)
  progress_seconds: Optional[float] = option(
      30, "Log progress (documents, instances, MB/s) this often.", OUTPUT, kind="integer")


def main(options):
  """create_pretraining_data.py without --beam_runner; options: its DataOptions."""
  input_files, output_files = parsed(options)
  tokenizer = tokenization.FullTokenizer(vocab_file=options.vocab_file,
                                         do_lower_case=options.do_lower_case)
  run_shards(input_files, output_files, tokenizer, options.instances, options.num_shards,
             options.shard_index, num_workers=options.num_workers,
             progress_seconds=options.progress_seconds)


def parsed(options):
  """(input files, output files) of a DataOptions, checked: no output is an input."""
  input_files = fileio.input_files(options.input_file)
  output_files = [path for path in options.output_file.split(",") if path.strip()]
  inputs = [("--input_file", options.input_file), ("--vocab_file", options.vocab_file)]
  for shard in range(max(options.num_shards, 1)):
    for path in shard_output_files(output_files, shard, max(options.num_shards, 1)):
      fileio.check_not_input(path, inputs, "--output_file")
  return input_files, output_files


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
      _, output_order = maker.create_training_instances(progress_seconds, on_block=spool.add)
      make_seconds = time.time() - start - read_seconds
      written = spool.write(output_order, output_files, progress_seconds)
  else:
    instances, output_order = maker.create_training_instances(progress_seconds)
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
  """One-line errors for flags that would fail every shard (the Options checked themselves)."""
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

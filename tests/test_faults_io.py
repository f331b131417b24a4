"""Faults of files and start-up thrown at the scripts: outputs onto inputs,
compressed input, encodings, files that are not vocabularies, full disks, gs:// without network,
flags given twice, Ctrl-C, wrong types through the Python API, and everyday path mistakes.

Each case asserts the exit status, the one `error:` line (naming the file or flag), no traceback,
and the disk afterwards: inputs byte for byte as they were, no temporary file left; interrupts also
that no child process remains. One tiny world is made once per module (a vocabulary, a config, a
corpus, a tiny TF1 checkpoint); scripts run through run_script's pre-imported server, except where
the test needs a real process (a file size limit, a signal).
"""
import bz2
import concurrent.futures
import gzip
import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
import zipfile

import numpy as np
import psutil
import pytest

from support.paths import REPO
from support.script_runner import run_script

WORDS = ["the", "dog", "is", "hairy", "cat", "sat", "on", "a", "mat", "it", "not", "big", "red",
         "ran", "far", "away", "home", "and", "then", "slept", "all", "day", "long", "with"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + WORDS
CONFIG = {"vocab_size": len(VOCAB), "hidden_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 64,
          "type_vocab_size": 2}
PRETRAINING = ["--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=1"]


def corpus_text(documents=30, seed=0):
  rng = np.random.RandomState(seed)
  return "\n\n".join("\n".join(" ".join(rng.choice(WORDS, 3 + i % 6)) + " ." for i in range(8))
                     for _ in range(documents)) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  root = tmp_path_factory.mktemp("faults_io")
  (root / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  (root / "bert_config.json").write_text(json.dumps(CONFIG))
  (root / "corpus.txt").write_text(corpus_text())
  (root / "big.txt").write_text(corpus_text(2000, seed=1))
  (root / "lines.txt").write_text("the dog is hairy .\nthe cat sat ||| on a mat .\n")
  return root


def snapshot(directory):
  """{relative path: bytes} of every file under `directory`."""
  files = {}
  for parent, _, names in os.walk(directory):
    for name in names:
      path = os.path.join(parent, name)
      if not os.path.islink(path):
        with open(path, "rb") as f:
          files[os.path.relpath(path, directory)] = f.read()
  return files


@pytest.fixture
def work(world, tmp_path):
  """A copy of the world in tmp_path; after the test, no temporary file may be left in it."""
  for name in os.listdir(world):
    if os.path.isfile(world / name):
      (tmp_path / name).write_bytes((world / name).read_bytes())
  yield tmp_path
  left = [name for name in snapshot(tmp_path) if ".tmp-" in name or ".spool-" in name]
  assert not left, left


def one_error_line(done, *fragments, code=1):
  """The run ended with `code` and one `error:` line holding every fragment; no traceback."""
  assert done.returncode == code, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
  assert len(errors) == 1, done.stderr[-3000:]
  for fragment in fragments:
    assert fragment in errors[0], errors[0]
  return errors[0]


def extract_features(work, checkpoint, *args):
  """extract_features.py on the world's model; later flags win (absl takes the last)."""
  return run_script("extract_features.py", f"--input_file={work / 'lines.txt'}",
                    f"--vocab_file={work / 'vocab.txt'}",
                    f"--bert_config_file={work / 'bert_config.json'}",
                    f"--init_checkpoint={checkpoint}", f"--output_file={work / 'f.jsonl'}",
                    "--max_seq_length=16", "--layers=-1", *args)


def pretraining_data(work, *args):
  return run_script("create_pretraining_data.py", f"--vocab_file={work / 'vocab.txt'}",
                    *PRETRAINING, *args)


# ------------------------------------------------------------------------------------------------
# Outputs onto inputs.


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink", "glob", "vocab_in_list", "shard"])
def test_create_pretraining_data_never_writes_over_its_input(work, how):
  corpus = work / "corpus.txt"
  input_file, output = str(corpus), str(corpus)
  if how == "symlink":
    os.symlink(corpus, work / "link.txt")
    output = str(work / "link.txt")
  elif how == "hardlink":
    os.link(corpus, work / "hard.rec")
    output = str(work / "hard.rec")
  elif how == "glob":  # a new file the input glob would read on the next run
    input_file, output = str(work / "c*.txt"), str(work / "corpus_records.txt")
  elif how == "vocab_in_list":
    output = f"{work / 'a.tfrecord'},{work / 'vocab.txt'}"
  elif how == "shard":  # --num_shards names outputs <output_file>-0000i-of-0000N
    for i in range(2):
      (work / f"part-{i:05d}-of-00002").write_text(corpus_text(3, seed=i))
    input_file, output = str(work / "part-*"), str(work / "part")
  before = snapshot(work)
  done = pretraining_data(work, f"--input_file={input_file}", f"--output_file={output}",
                          "--num_shards=2" if how == "shard" else "--num_shards=1")
  one_error_line(done, "--output_file: ", "expected", "--vocab_file" if how == "vocab_in_list"
                 else "--input_file")
  assert snapshot(work) == before


def test_create_vocab_overwrite_onto_its_input_is_refused(work):
  before = snapshot(work)
  done = run_script("create_vocab.py", f"--input_file={work / 'corpus.txt'}",
                    f"--output_file={work / 'corpus.txt'}", "--overwrite", "--vocab_size=200")
  one_error_line(done, f"--output_file: {work / 'corpus.txt'} is --input_file")
  assert snapshot(work) == before


@pytest.mark.parametrize("onto", ["input_file", "vocab_file", "bert_config_file"])
def test_extract_features_output_onto_an_input_is_refused(work, onto):
  paths = {"input_file": work / "lines.txt", "vocab_file": work / "vocab.txt",
           "bert_config_file": work / "bert_config.json"}
  before = snapshot(work)
  done = run_script("extract_features.py", *[f"--{k}={v}" for k, v in paths.items()],
                    f"--init_checkpoint={work / 'none' / 'bert_model.ckpt'}",
                    f"--output_file={paths[onto]}")
  one_error_line(done, f"--output_file: {paths[onto]} is --{onto}")
  assert snapshot(work) == before


def test_run_squad_predict_file_named_as_its_predictions_is_refused(work):
  (work / "out").mkdir()
  predict = work / "out" / "predictions.json"
  predict.write_text(json.dumps({"version": "1.1", "data": []}))
  before = snapshot(work)
  done = run_script("run_squad.py", f"--vocab_file={work / 'vocab.txt'}",
                    f"--bert_config_file={work / 'bert_config.json'}", "--do_predict",
                    f"--predict_file={predict}", f"--output_dir={work / 'out'}")
  one_error_line(done, f"--output_dir: {predict} is --predict_file")
  assert snapshot(work) == before


@pytest.fixture(scope="module")
def checkpoint(world):
  """A tiny TF1 checkpoint of CONFIG's encoder: world/model/bert_model.ckpt."""
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  model = modeling.BertModel(BertConfig.from_dict(CONFIG))
  ids = np.zeros([1, 4], np.int32)
  model({"input_ids": ids, "input_mask": ids + 1, "segment_ids": ids})
  (world / "model").mkdir()
  return checkpoints.save_tf1_checkpoint(model, str(world / "model" / "bert_model.ckpt"))


def test_convert_checkpoint_onto_its_input_is_refused(world, checkpoint):
  before = snapshot(world / "model")
  done = run_script("convert_checkpoint.py", f"--input={checkpoint}", f"--output={checkpoint}",
                    f"--bert_config_file={world / 'bert_config.json'}", "--output_format=tf2")
  one_error_line(done, f"--output: {checkpoint} is --input")
  assert snapshot(world / "model") == before


# ------------------------------------------------------------------------------------------------
# Compressed input.


def compress(path, how, name=None):
  data = open(path, "rb").read()
  target = f"{path}.{how}" if name is None else os.path.join(os.path.dirname(path), name)
  with open(target, "wb") as f:
    f.write({"gz": gzip.compress, "bz2": bz2.compress}[how](data))
  return target


@pytest.fixture(scope="module")
def plain_records(world, tmp_path_factory):
  path = tmp_path_factory.mktemp("plain") / "plain.tfrecord"
  done = pretraining_data(world, f"--input_file={world / 'corpus.txt'}", f"--output_file={path}")
  assert done.returncode == 0, done.stderr[-2000:]
  return path.read_bytes()


@pytest.mark.parametrize("how,name,workers", [("gz", None, 2), ("bz2", None, 1),
                                              ("gz", "disguised.txt", 1)])
def test_compressed_corpus_gives_the_same_records(work, plain_records, how, name, workers):
  packed = compress(str(work / "corpus.txt"), how, name)
  done = pretraining_data(work, f"--input_file={packed}", f"--output_file={work / 'c.tfrecord'}",
                          f"--num_workers={workers}")
  assert done.returncode == 0, done.stderr[-2000:]
  assert (work / "c.tfrecord").read_bytes() == plain_records


def test_compressed_corpus_gives_the_same_vocabulary(work):
  packed = compress(str(work / "corpus.txt"), "gz")
  for source, output in ((work / "corpus.txt", "plain_vocab.txt"), (packed, "gz_vocab.txt")):
    done = run_script("create_vocab.py", f"--input_file={source}", f"--output_file={work / output}",
                      "--vocab_size=150")
    assert done.returncode == 0, done.stderr[-2000:]
  assert (work / "gz_vocab.txt").read_text() == (work / "plain_vocab.txt").read_text()
  assert "invalid UTF-8" not in done.stderr


def test_compressed_task_files_read_as_plain(work):
  from bert_tf.io import fileio  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import squad  # pylint: disable=g-import-not-at-top
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  question = {"id": "q1", "question": "who sat ?",
              "answers": [{"text": "the dog", "answer_start": 0}]}
  dataset = {"version": "1.1",
             "data": [{"paragraphs": [{"context": "the dog sat .", "qas": [question]}]}]}
  (work / "train.json").write_text(json.dumps(dataset))
  assert squad.load_squad_json(compress(str(work / "train.json"), "bz2")) == dataset
  (work / "train.tsv").write_text("a\tb\r\nc\td\n")
  assert fileio.read_lines(compress(str(work / "train.tsv"), "gz")) == ["a\tb\n", "c\td\n"]
  vocab = tokenization.load_vocab(compress(str(work / "vocab.txt"), "gz", "vocab_gz.txt"))
  assert list(vocab) == VOCAB


@pytest.mark.parametrize("damage", ["zip", "truncated"])
def test_zip_and_truncated_gzip_input_end_in_one_line(work, damage):
  if damage == "zip":
    bad = str(work / "corpus.zip")
    with zipfile.ZipFile(bad, "w") as z:
      z.write(work / "corpus.txt", "corpus.txt")
    expected = "a zip archive; expected a text file"
  else:
    packed = compress(str(work / "corpus.txt"), "gz")
    bad = str(work / "cut.gz")
    open(bad, "wb").write(open(packed, "rb").read()[:300])
    expected = "a damaged or truncated gzip file"
  before = snapshot(work)
  done = pretraining_data(work, f"--input_file={bad}", f"--output_file={work / 'out.tfrecord'}")
  one_error_line(done, f"--input_file: {bad}: {expected}")
  assert snapshot(work) == before


# ------------------------------------------------------------------------------------------------
# Pipes and process substitution (`--input_file=<(zcat corpus.gz)`): read as files, compression
# told without seeking back.


def _fifo_of(work, name, data):
  """A named pipe in work that a thread fills with `data` once a reader opens it."""
  import threading  # pylint: disable=g-import-not-at-top
  path = work / name
  os.mkfifo(path)

  def feed():
    with open(path, "wb") as f:
      f.write(data)

  threading.Thread(target=feed, daemon=True).start()
  return path


@pytest.mark.parametrize("how", ["plain", "gz", "bz2"])
def test_a_corpus_through_a_pipe_gives_the_same_records(work, plain_records, how):
  data = (work / "corpus.txt").read_bytes()
  data = {"plain": data, "gz": gzip.compress(data), "bz2": bz2.compress(data)}[how]
  fifo = _fifo_of(work, "corpus.pipe", data)
  done = pretraining_data(work, f"--input_file={fifo}", f"--output_file={work / 'p.tfrecord'}")
  assert done.returncode == 0, done.stderr[-2000:]
  assert (work / "p.tfrecord").read_bytes() == plain_records
  os.unlink(fifo)


def test_create_vocab_reads_a_pipe_as_its_file(work):
  fifo = _fifo_of(work, "corpus.pipe", gzip.compress((work / "corpus.txt").read_bytes()))
  for source, output in ((work / "corpus.txt", "plain_vocab.txt"), (fifo, "pipe_vocab.txt")):
    done = run_script("create_vocab.py", f"--input_file={source}", f"--output_file={work / output}",
                      "--vocab_size=150")
    assert done.returncode == 0, done.stderr[-2000:]
  assert (work / "pipe_vocab.txt").read_text() == (work / "plain_vocab.txt").read_text()
  os.unlink(fifo)


# ------------------------------------------------------------------------------------------------
# Corrupt records.


def test_corrupt_cached_features_are_named_by_file_and_record(tmp_path):
  """The records a fine-tuning run writes into its output_dir and reads back (the original's
  cached features, train.tf_record and the like) go through records_input_fn: one flipped byte
  names the file, the record and its byte, not TensorFlow's `Graph execution error:`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.data import records  # pylint: disable=g-import-not-at-top
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import glue  # pylint: disable=g-import-not-at-top
  from bert_tf.training import loop  # pylint: disable=g-import-not-at-top
  path = str(tmp_path / "eval.tf_record")
  records.write_records(path, [{"input_ids": [i] * 8, "input_mask": [1] * 8,
                                "segment_ids": [0] * 8, "label_ids": [i % 2],
                                "is_real_example": [1]} for i in range(20)])
  data = bytearray(open(path, "rb").read())
  size = len(data) // 20  # every record as long: 8 + 4 + its bytes + 4
  middle = len(data) // 2 + 6  # inside a record's payload
  data[middle] ^= 0x01
  open(path, "wb").write(bytes(data))
  model = lambda features, training: {"ids": features["input_ids"]}  # noqa: E731
  input_fn = records.records_input_fn([path], glue.classifier_features(8), 4, False)
  with pytest.raises(BertTfError, match=rf"^{path}: record {middle // size + 1} is corrupt or "
                                        rf"truncated at byte {middle // size * size}: the file is "
                                        r"damaged; expected whole TFRecord files"):
    list(loop.predict(tf.distribute.get_strategy(), model, input_fn))


# ------------------------------------------------------------------------------------------------
# Encodings.


@pytest.mark.parametrize("script", ["create_vocab.py", "create_pretraining_data.py"])
def test_random_bytes_are_named_by_file_line_and_byte_by_both_corpus_readers(work, script):
  """One UTF-8 rule for the corpus readers: a file that is not text (here random bytes, the first
  ones invalid UTF-8) is one error line naming where, before anything is learned or written."""
  data = b"the dog .\n" * 3 + bytes(np.random.RandomState(5).randint(128, 256, 4000,
                                                                      dtype=np.uint8))
  (work / "random.bin").write_bytes(data)
  with pytest.raises(UnicodeDecodeError) as raised:
    data.decode("utf-8")
  first = raised.value.start
  before = snapshot(work)
  args = [f"--input_file={work / 'random.bin'}", f"--output_file={work / 'out'}"]
  done = (run_script(script, *args, "--vocab_size=150") if script == "create_vocab.py" else
          pretraining_data(work, *args))
  one_error_line(done, f"--input_file: {work / 'random.bin'}: not UTF-8 (line 4, byte {first} is "
                 f"{data[first]:#04x}); expected UTF-8 text")
  assert snapshot(work) == before


def test_a_few_invalid_bytes_in_a_corpus_are_dropped_and_their_place_named(work):
  """As the original's convert_to_unicode: a line's stray invalid bytes are dropped, the rest of
  the corpus read; a warning names the first place."""
  (work / "latin.txt").write_bytes((work / "corpus.txt").read_bytes() + b"the caf\xe9 dog .\n")
  lines = (work / "corpus.txt").read_text().count("\n")
  done = pretraining_data(work, f"--input_file={work / 'latin.txt'}",
                          f"--output_file={work / 'l.tfrecord'}")
  assert done.returncode == 0, done.stderr[-2000:]
  byte = len((work / "corpus.txt").read_bytes()) + len(b"the caf")
  assert f"{work / 'latin.txt'}: not UTF-8 at line {lines + 1}, byte {byte} is 0xe9: such bytes " \
         f"are dropped from their lines" in done.stderr, done.stderr[-2000:]


def test_latin1_input_to_extract_features_names_file_line_and_byte(work, checkpoint):
  (work / "latin1.txt").write_bytes("the dog .\nthe café is big .\n".encode("latin-1"))
  done = extract_features(work, checkpoint, f"--input_file={work / 'latin1.txt'}")
  one_error_line(done, f"--input_file: {work / 'latin1.txt'}: not UTF-8 (line 2, byte 17 is 0xe9)",
                 "expected UTF-8")
  assert not (work / "f.jsonl").exists()


@pytest.mark.parametrize("reader", ["squad", "vocab", "tsv", "corpus"])
def test_utf16_files_are_named_as_utf16(work, reader):
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.io import fileio  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import squad  # pylint: disable=g-import-not-at-top
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  path = work / "utf16.txt"
  path.write_bytes("\n".join(VOCAB).encode("utf-16"))
  if reader == "corpus":
    done = pretraining_data(work, f"--input_file={path}", f"--output_file={work / 'o.tfrecord'}")
    one_error_line(done, f"--input_file: {path}: UTF-16 text", "expected UTF-8")
    return
  read = {"squad": squad.load_squad_json, "vocab": tokenization.FullTokenizer,
          "tsv": fileio.read_lines}[reader]
  with pytest.raises(BertTfError, match=f"^{path}: UTF-16 text .*expected UTF-8"):
    read(str(path))


def test_utf8_byte_order_mark_gives_the_same_ids(work):
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  (work / "bom_vocab.txt").write_bytes(b"\xef\xbb\xbf" + (work / "vocab.txt").read_bytes())
  with_bom = tokenization.FullTokenizer(str(work / "bom_vocab.txt"))
  plain = tokenization.FullTokenizer(str(work / "vocab.txt"))
  assert with_bom.vocab == plain.vocab
  assert with_bom.tokenize_to_ids("\ufeffthe dog sat") == plain.tokenize_to_ids("the dog sat")


# ------------------------------------------------------------------------------------------------
# Vocabularies that are not the model's.


def test_a_corpus_given_as_vocab_file_is_named(work):
  (work / "mrpc").mkdir()
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  for split in ("train", "dev"):
    (work / "mrpc" / f"{split}.tsv").write_text(header + "1\t1\t2\tthe dog .\tthe cat .\n")
  before = snapshot(work)
  done = run_script("run_classifier.py", "--task_name=MRPC", f"--data_dir={work / 'mrpc'}",
                    f"--vocab_file={work / 'corpus.txt'}",
                    f"--bert_config_file={work / 'bert_config.json'}", "--do_train",
                    "--max_seq_length=16", f"--output_dir={work / 'out'}")
  one_error_line(done, f"{work / 'corpus.txt'}: not a BERT vocabulary: it has no [CLS] or [SEP]")
  assert {k: v for k, v in snapshot(work).items() if not k.startswith("out")} == before


def _vocab_file(work, name, lines):
  (work / name).write_text("\n".join(lines) + "\n")
  return str(work / name)


def test_a_trailing_blank_line_is_no_token_for_any_script(work, plain_records):
  """The one reading of a vocabulary (tokenization.load_vocab): create_pretraining_data.py and
  run_classifier.py (its size against the model's) agree on a vocab.txt ending in a blank line:
  the ids and the size of the same file without it."""
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  path = _vocab_file(work, "trailing.txt", VOCAB + ["", ""])
  vocab = tokenization.load_vocab(path)
  assert vocab == tokenization.load_vocab(str(work / "vocab.txt"))
  assert tokenization.vocab_size(vocab) == len(VOCAB)
  BertConfig.from_dict(CONFIG).check_vocab_size(tokenization.vocab_size(vocab), path, exact=True)
  done = pretraining_data(work, f"--input_file={work / 'corpus.txt'}", f"--vocab_file={path}",
                          f"--output_file={work / 't.tfrecord'}")
  assert done.returncode == 0, done.stderr[-2000:]
  assert (work / "t.tfrecord").read_bytes() == plain_records


def test_blank_and_repeated_lines_keep_the_originals_ids_and_are_named(work, caplog):
  """As the original's load_vocab counts lines: a blank line keeps its id, a repeated token takes
  its later line's id; each is named in one warning with its line number. The fast tokenizer
  gives the same ids."""
  import logging  # pylint: disable=g-import-not-at-top
  from bert_tf.text import fast_tokenization  # pylint: disable=g-import-not-at-top
  from bert_tf.text import tokenization  # pylint: disable=g-import-not-at-top
  lines = VOCAB[:9] + [""] + VOCAB[9:] + ["dog"]
  path = _vocab_file(work, "odd.txt", lines)
  with caplog.at_level(logging.WARNING):
    vocab = tokenization.load_vocab(path)
    tokenization.load_vocab(path)  # read twice, warned once
  assert vocab["dog"] == len(lines) - 1 and vocab["is"] == lines.index("is")
  assert tokenization.vocab_size(vocab) == len(lines)
  messages = [r.getMessage() for r in caplog.records]
  assert [m for m in messages if m.startswith(f"{path}: line 10 is blank: it keeps its id (9)")]
  assert [m for m in messages if m.startswith(f"{path}: line {len(lines)} repeats 'dog' of line "
                                              f"{VOCAB.index('dog') + 1}:")]
  assert len(messages) == 2, messages
  text = "the dog is hairy and the cat sat"
  full = tokenization.FullTokenizer(path)
  assert full.tokenize_to_ids(text) == [vocab[t] for t in text.split()]
  fast = fast_tokenization.FastTokenizer(path)
  assert fast.tokenize_to_ids([text]) == [full.tokenize_to_ids(text)]


def test_extract_features_with_a_far_smaller_vocabulary_than_the_model(work, checkpoint):
  (work / "small_config.json").write_text(json.dumps(dict(CONFIG, vocab_size=30522)))
  done = extract_features(work, checkpoint, f"--bert_config_file={work / 'small_config.json'}")
  one_error_line(done, f"--vocab_file: {work / 'vocab.txt'} has {len(VOCAB)} tokens but the "
                 f"model's vocab_size is 30522 (--bert_config_file)")
  assert not (work / "f.jsonl").exists()
  # The rule (BertConfig.check_vocab_size, for every script that pairs a vocab with a config):
  # padding rows and create_vocab's shortfall pass, a vocabulary of another model does not.
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  for vocab_size, num_tokens, fits in ((30528, 30522, True), (1000, 600, True),
                                       (30522, 8000, False), (30522, 30523, False),
                                       (30522, 119547, False)):
    config = BertConfig.from_dict(dict(CONFIG, vocab_size=vocab_size))
    if fits:
      config.check_vocab_size(num_tokens, "v.txt")
    else:
      with pytest.raises(BertTfError, match=f"v.txt has {num_tokens} tokens"):
        config.check_vocab_size(num_tokens, "v.txt")


# ------------------------------------------------------------------------------------------------
# Full disks: a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes writes fail with EFBIG as a
# full disk fails them with ENOSPC; the message is the same for both.


def _limit_file_size(size):
  def limit():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
  return limit


def run_with_file_size_limit(size, script, *args):
  return subprocess.run([sys.executable, os.path.join(REPO, script), *map(str, args)],
                        preexec_fn=_limit_file_size(size), capture_output=True, text=True,
                        timeout=120)


@pytest.mark.parametrize("workers", [1, 2])
def test_records_onto_a_full_disk(work, workers):
  before = snapshot(work)
  output = work / "full.tfrecord"
  done = run_with_file_size_limit(
      50_000, "create_pretraining_data.py", f"--input_file={work / 'big.txt'}",
      f"--output_file={output}", f"--vocab_file={work / 'vocab.txt'}", f"--num_workers={workers}",
      *PRETRAINING)
  where = str(output) if workers == 1 else f"--output_file={output}"
  one_error_line(done, f"error: {where}: no space left on device")
  assert snapshot(work) == before  # nothing half-written: no output, no spool, no temporary


def test_create_vocab_overwrite_onto_a_full_disk_keeps_the_old_vocabulary(work):
  before = snapshot(work)
  done = run_with_file_size_limit(100, "create_vocab.py", f"--input_file={work / 'corpus.txt'}",
                                  f"--output_file={work / 'vocab.txt'}", "--overwrite",
                                  "--vocab_size=150")
  one_error_line(done, f"error: {work / 'vocab.txt'}: no space left on device")
  assert snapshot(work) == before


class file_size_limit:  # pylint: disable=invalid-name
  """This process's writes past `size` bytes fail with EFBIG, within the block."""

  def __init__(self, size):
    self.size = size

  def __enter__(self):
    self.saved = signal.signal(signal.SIGXFSZ, signal.SIG_IGN), resource.getrlimit(
        resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (self.size, self.saved[1][1]))

  def __exit__(self, *unused):
    resource.setrlimit(resource.RLIMIT_FSIZE, self.saved[1])
    signal.signal(signal.SIGXFSZ, self.saved[0])


def test_features_checkpoints_and_exports_onto_a_full_disk_name_their_path(tmp_path, checkpoint):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from bert_tf.cli import app  # pylint: disable=g-import-not-at-top
  from bert_tf.drivers import feature_extraction  # pylint: disable=g-import-not-at-top
  from bert_tf.model import checkpoints  # pylint: disable=g-import-not-at-top
  from bert_tf.model.config import BertConfig  # pylint: disable=g-import-not-at-top
  from bert_tf.model import modeling  # pylint: disable=g-import-not-at-top
  config = BertConfig.from_dict(CONFIG)
  extractor = feature_extraction.FeatureExtractor(config, [-1])
  features = [feature_extraction.InputFeatures(i, ["[CLS]"] * 8, [2] * 8, [1] * 8, [0] * 8)
              for i in range(40)]
  model = modeling.BertModel(config)
  ids = np.zeros([1, 4], np.int32)
  model({"input_ids": ids, "input_mask": ids + 1, "segment_ids": ids})
  writes = {
      str(tmp_path / "f.jsonl"): lambda path: feature_extraction.write_features(
          path, extractor, features, 8),
      str(tmp_path / "ckpt-1"): lambda path: tf.train.Checkpoint(model=model).write(path),
      str(tmp_path / "bert_model.ckpt"): lambda path: checkpoints.save_tf1_checkpoint(model, path),
  }
  for path, write in writes.items():
    with file_size_limit(2000), pytest.raises(Exception) as raised:
      write(path)
    assert app._one_line(raised.value) == (  # pylint: disable=protected-access
        f"error: {path}: no space left on device (the disk is full, or the file passed a size "
        f"limit); expected room to write it: free space or write elsewhere")
  assert not [name for name in os.listdir(tmp_path) if ".tmp-" in name]
  # ENOSPC from TensorFlow (ResourceExhaustedError) is the disk, not "out of memory".
  full = tf.errors.ResourceExhaustedError(None, None, f"{tmp_path}/out/ckpt-2_temp/part-00000-of-"
                                          f"00001.data-00000-of-00001.tempstate1; No space left "
                                          f"on device")
  assert app._one_line(full).startswith(  # pylint: disable=protected-access
      f"error: {tmp_path}/out/ckpt-2: no space left on device")
  # A SavedModel's variables, written under export.save's temporary version directory.
  export = OSError(27, "File too large", f"{tmp_path}/export/.tmp-17-99/variables/variables_temp/"
                   f"part-00000-of-00001.data-00000-of-00001.tempstate5")
  assert app._one_line(export).startswith(  # pylint: disable=protected-access
      f"error: {tmp_path}/export: no space left on device")


# ------------------------------------------------------------------------------------------------
# Start-up: gs:// without network, a flag given twice.


def test_gs_path_without_network_is_named_within_seconds(work):
  run_script("create_vocab.py", "--helpshort")  # the runner's server started, not timed below
  start = time.monotonic()
  done = run_script("create_vocab.py", "--input_file=gs://no-such-bucket/corpus.txt",
                    f"--output_file={work / 'v.txt'}")
  one_error_line(done, "error: --input_file: gs://no-such-bucket/corpus.txt: cannot reach Google "
                 "Cloud Storage")
  assert time.monotonic() - start < 8
  assert not (work / "v.txt").exists()


def test_a_flag_given_twice_warns_and_takes_the_last(work):
  done = run_script("create_vocab.py", f"--input_file={work / 'corpus.txt'}",
                    f"--output_file={work / 'v.txt'}", "--vocab_size=150", "--vocab_size", "180",
                    "--do_lower_case", "--nodo_lower_case", "--min_count=1", "--min_count=1")
  assert done.returncode == 0, done.stderr[-2000:]
  warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
  assert warnings == ["warning: --vocab_size is given 2 times (150, 180): using the last, 180",
                      "warning: --do_lower_case is given 2 times (true, false): using the last, "
                      "false"]
  assert len((work / "v.txt").read_text().splitlines()) == 180


# ------------------------------------------------------------------------------------------------
# Ctrl-C.


def _alive(processes):
  return [p.pid for p in processes if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _ctrl_c_as_a_terminal_gives_it():
  """In the child: SIGINT's default action, whatever this process inherited (a shell's
  background job, or a test runner's worker, may ignore it; an ignored SIGINT stays ignored)."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_create_pretraining_data_ends_in_one_line(work):
  before = snapshot(work)
  output = work / "int.tfrecord"
  process = subprocess.Popen(
      [sys.executable, os.path.join(REPO, "create_pretraining_data.py"),
       f"--input_file={work / 'big.txt'}", f"--output_file={output}",
       f"--vocab_file={work / 'vocab.txt'}", "--num_workers=2", "--progress_seconds=0",
       "--dupe_factor=5", *PRETRAINING[:2]], stderr=subprocess.PIPE, text=True,
      preexec_fn=_ctrl_c_as_a_terminal_gives_it)
  lines = []
  for line in process.stderr:  # wait until it makes instances, its spool's workers at work
    lines.append(line)
    if "making instances:" in line and "pass 2/" in line:
      break
  children = psutil.Process(process.pid).children(recursive=True)
  assert children, "".join(lines)
  process.send_signal(signal.SIGINT)
  rest = process.stderr.read()
  assert process.wait(timeout=60) == 130, rest[-3000:]
  assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest[-3000:]
  assert rest.splitlines()[-1] == (f"interrupted: nothing was written to --output_file={output}; "
                                   f"nothing half-written is left")
  psutil.wait_procs(children, timeout=10)
  assert not _alive(children)
  assert snapshot(work) == before


def test_ctrl_c_in_training_into_its_data_dir_keeps_the_last_checkpoint(work, checkpoint):
  """Fine-tuning with --output_dir equal to --data_dir (allowed: the run writes only names of its
  own, bert_config.json, vocab.txt, task_config.json, *.tf_record, checkpoints, results), stopped
  by Ctrl-C after its first checkpoint: status 130, one line naming the checkpoint kept, no data
  file replaced, nothing half-written."""
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  for split in ("train", "dev", "test"):
    (work / f"{split}.tsv").write_text(header + "1\t1\t2\tthe dog .\tthe cat .\n" * 4)
  before = snapshot(work)
  # run_script forks the run from its server; the run is the process whose working directory is
  # `cwd` (made for it alone).
  cwd = work / "cwd"
  cwd.mkdir()
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    running = pool.submit(
        run_script, "run_classifier.py", "--task_name=MRPC", f"--data_dir={work}",
        f"--output_dir={work}", f"--vocab_file={work / 'vocab.txt'}",
        f"--bert_config_file={work / 'bert_config.json'}", f"--init_checkpoint={checkpoint}",
        "--do_train", "--train_batch_size=1", "--num_train_epochs=100000", "--max_seq_length=16",
        "--save_checkpoints_steps=1", "--log_steps=1", cwd=cwd, timeout=300)
    deadline = time.monotonic() + 240
    # the checkpoint is whole once the `checkpoint` file names it (written after its files)
    while not (work / "checkpoint").exists() and time.monotonic() < deadline:
      assert not running.done(), running.result().stderr[-3000:]
      time.sleep(0.1)
    run = next(p for p in psutil.process_iter() if _cwd(p) == str(cwd))
    run.send_signal(signal.SIGINT)
    done = running.result()
  assert done.returncode == 130, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  # TensorFlow may still log at exit (warnings of objects collected): the line is the only one
  # of its kind, not necessarily the last.
  lines = [line for line in done.stderr.splitlines() if line.startswith("interrupted")]
  assert len(lines) == 1, done.stderr[-3000:]
  assert re.fullmatch(rf"interrupted: the latest checkpoint, {work}/model\.ckpt-(\d+), is kept "
                      r"\(a rerun resumes from it\); nothing half-written is left",
                      lines[0]), done.stderr[-3000:]
  after = snapshot(work)
  assert {name: after[name] for name in before} == before
  assert not [name for name in os.listdir(work) if "_temp" in name]
  assert not _alive([run])


def _cwd(process):
  try:
    return process.cwd()
  except (psutil.Error, OSError):
    return None


# ------------------------------------------------------------------------------------------------
# The Python API with wrong types.


@pytest.mark.parametrize("path", [42, None, b"out"])
def test_predictor_load_of_a_path_that_is_not_one(path):
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  with pytest.raises(TypeError, match=r"predictor.load: path should be a str or os.PathLike"):
    predictor.load(path)


TASK_CONFIG = {"export_kind": "classifier", "task_name": "MRPC", "do_lower_case": True,
               "max_seq_length": 16, "label_list": ["0", "1"], "pair": True, "regression": False}


@pytest.mark.parametrize("texts,expected", [
    ([("the dog", "the cat"), None], r"^texts\[1\]: expected a \(text_a, text_b\) pair \(give "
                                     r"pairs, or texts and text_b=\), got NoneType 'None'"),
    (["the dog", ("the dog", "the cat", "sat")],
     r"^texts\[0\]: expected a \(text_a, text_b\) pair \(give pairs, or texts and text_b=\), got "
     r"str"),
    ([("the dog", 3)], r"^text_b\[0\]: expected a string, got int"),
])
def test_predictor_names_the_input_that_is_not_a_pair(texts, expected):
  import types  # pylint: disable=g-import-not-at-top
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.tasks import glue_server  # pylint: disable=g-import-not-at-top
  classifier = types.SimpleNamespace(task="glue", pair=True)
  with pytest.raises(BertTfError, match=expected):
    glue_server.ClassifierServer.predictor_inputs(classifier, texts)


@pytest.mark.parametrize("content,expected", ids=["list", "missing", "wrong_type", "utf16"],
                         argvalues=[
    (json.dumps([TASK_CONFIG]).encode(), "expected a JSON object .*, got a list"),
    (json.dumps({k: v for k, v in TASK_CONFIG.items() if k != "max_seq_length"}).encode(),
     "field 'max_seq_length' should be a int, is missing"),
    (json.dumps(dict(TASK_CONFIG, do_lower_case="yes")).encode(),
     "field 'do_lower_case' should be a bool, is a str"),
    (json.dumps(TASK_CONFIG).encode("utf-16"), "UTF-16 text .*expected UTF-8"),
])
def test_predictor_load_of_a_bad_task_config(tmp_path, content, expected):
  from bert_tf.errors import BertTfError  # pylint: disable=g-import-not-at-top
  from bert_tf.serving import predictor  # pylint: disable=g-import-not-at-top
  (tmp_path / "task_config.json").write_bytes(content)
  with pytest.raises(BertTfError, match=f"^{tmp_path / 'task_config.json'}: {expected}"):
    predictor.load(str(tmp_path))
  with pytest.raises(BertTfError, match=f"^{tmp_path / 'task_config.json'}: not a directory"):
    predictor.load(tmp_path / "task_config.json")


# ------------------------------------------------------------------------------------------------
# Everyday path mistakes: a directory for a file, an empty file, a glob that matches nothing.


@pytest.mark.parametrize("script,args,expected", [
    ("create_pretraining_data.py", ["--input_file={w}/dir", "--output_file={w}/o.tfrecord"],
     "--input_file: {w}/dir: is a directory; expected a file"),
    ("create_pretraining_data.py", ["--input_file={w}/dir/*.txt", "--output_file={w}/o.tfrecord"],
     "--input_file: '{w}/dir/*.txt' matches no file"),
    ("create_vocab.py", ["--input_file={w}/empty.txt", "--output_file={w}/v.txt"],
     "--input_file: no word in {w}/empty.txt (expected text; the files are empty or blank)"),
    ("create_vocab.py", ["--input_file={w}/corpus.txt", "--output_file={w}/dir", "--overwrite"],
     "--output_file: {w}/dir: is a directory; expected the path of a file"),
    ("extract_features.py", ["--output_file={w}/dir"],
     "--output_file: {w}/dir: is a directory; expected the path of a file"),
    ("extract_features.py", ["--input_file={w}/empty.txt"], "{w}/empty.txt: --input_file is empty"),
    ("extract_features.py", ["--vocab_file={w}/dir"], "{w}/dir: is a directory; expected a file"),
], ids=["input_dir", "glob_of_nothing", "empty_corpus", "vocab_onto_dir", "features_onto_dir",
        "empty_lines", "vocab_dir"])
def test_everyday_path_mistakes_end_in_one_line(work, checkpoint, script, args, expected):
  (work / "dir").mkdir()
  (work / "empty.txt").write_text("")
  before = snapshot(work)
  args = [arg.format(w=work) for arg in args]
  if script == "extract_features.py":
    done = extract_features(work, checkpoint, *args)
  elif script == "create_pretraining_data.py":
    done = pretraining_data(work, *args)
  else:
    done = run_script(script, *args, "--vocab_size=150")
  one_error_line(done, f"error: {expected.format(w=work)}")
  assert snapshot(work) == before


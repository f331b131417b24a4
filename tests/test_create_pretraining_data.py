"""create_pretraining_data: the original's records, record for record; ablations, shards and bad input.

The oracle is bert-tensorflow 1.0.4's create_pretraining_data, run in one subprocess for every case (its
absl flags would clash with other scripts' flags in this process). That release has no
--do_whole_word_mask, so for whole-word masking the oracle's masking function is swapped for the
upstream (google-research/bert master) algorithm, restated below on token strings. Its load_vocab
keeps a repeated token's first id and shifts the ids after it, where master's (and every script
here: ids are the model's rows) gives the token its later line's id; for a vocabulary that repeats
tokens the oracle reads it with master's load_vocab, restated below.
"""
import concurrent.futures
import functools
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from support.paths import REPO, shared_data
from support.script_runner import run_script
from support.task_data import toy_corpus

from bert_tf.data.pretraining_data import algorithm
from bert_tf.data.pretraining_data import corpus as corpus_module
from bert_tf.data.pretraining_data import pipeline
from bert_tf.data.pretraining_data import record_bytes
from bert_tf.data.pretraining_data import record_writer
from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.io import workers
from bert_tf.model import objectives
from bert_tf.text import tokenization

ORACLE_DRIVER = r'''
import collections, json, os, random, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
from absl import flags
import tensorflow as tf
import bert.create_pretraining_data as cpd
from bert import tokenization
flags.FLAGS.mark_as_parsed()
original_masking = cpd.create_masked_lm_predictions


def whole_word_masking(tokens, masked_lm_prob, max_predictions_per_seq, vocab_words, rng):
  # Upstream master's create_masked_lm_predictions with do_whole_word_mask=True.
  cand_indexes = []
  for i, token in enumerate(tokens):
    if token in ("[CLS]", "[SEP]"):
      continue
    if cand_indexes and token.startswith("##"):
      cand_indexes[-1].append(i)
    else:
      cand_indexes.append([i])
  rng.shuffle(cand_indexes)
  output_tokens = list(tokens)
  num_to_predict = min(max_predictions_per_seq, max(1, int(round(len(tokens) * masked_lm_prob))))
  masked = []
  covered = set()
  for index_set in cand_indexes:
    if len(masked) >= num_to_predict:
      break
    if len(masked) + len(index_set) > num_to_predict:
      continue
    if any(index in covered for index in index_set):
      continue
    for index in index_set:
      covered.add(index)
      if rng.random() < 0.8:
        replacement = "[MASK]"
      elif rng.random() < 0.5:
        replacement = tokens[index]
      else:
        replacement = vocab_words[rng.randint(0, len(vocab_words) - 1)]
      output_tokens[index] = replacement
      masked.append((index, tokens[index]))
  masked.sort()
  return output_tokens, [i for i, _ in masked], [label for _, label in masked]


original_load_vocab = tokenization.load_vocab


def master_load_vocab(vocab_file):
  # google-research/bert master's: a token a line, its id the line's number, so that a repeated
  # token takes its later line's id (bert-tensorflow 1.0.4 keeps the first and shifts the rest).
  vocab = collections.OrderedDict()
  index = 0
  with tf.compat.v1.gfile.GFile(vocab_file, "r") as reader:
    while True:
      token = tokenization.convert_to_unicode(reader.readline())
      if not token:
        break
      vocab[token.strip()] = index
      index += 1
  return vocab


for case in json.loads(sys.argv[1]):
  cpd.create_masked_lm_predictions = whole_word_masking if case["wwm"] else original_masking
  tokenization.load_vocab = master_load_vocab if case["master_vocab"] else original_load_vocab
  tokenizer = tokenization.FullTokenizer(vocab_file=case["vocab"], do_lower_case=True)
  instances = cpd.create_training_instances(
      case["inputs"], tokenizer, case["max_seq_length"], case["dupe_factor"], 0.1, 0.15,
      case["max_predictions_per_seq"], random.Random(case["seed"]))
  cpd.write_instance_to_example_files(instances, tokenizer, case["max_seq_length"],
                                      case["max_predictions_per_seq"], case["outputs"])
'''


def _vocab_file():
  return os.path.join(shared_data("vocab"), "bert-base-uncased-vocab.txt")


def _repeating_vocab(tmp):
  """bert-base-uncased's vocabulary, "the" and "of" repeated in its middle, filled to 2**15
  distinct tokens."""
  with open(_vocab_file(), encoding="utf-8") as f:
    tokens = f.read().split("\n")
  while not tokens[-1]:
    tokens.pop()
  tokens = tokens[:5000] + ["the", "of"] + tokens[5000:]
  tokens += [f"filler{i}" for i in range(2 ** 15 + 2 - len(tokens))]
  path = tmp / "repeating_vocab.txt"
  path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  return str(path)


def _read_records(path):
  """Each record as a dict name -> list of values (the original's serialization order varies)."""
  out = []
  for raw in tf.data.TFRecordDataset(path):
    example = tf.train.Example.FromString(raw.numpy())
    out.append({name: list(f.int64_list.value) or list(f.float_list.value)
                for name, f in example.features.feature.items()})
  return out


def _ours(inputs, outputs, num_workers=1, **options):
  tokenizer = tokenization.FullTokenizer(_vocab_file(), do_lower_case=True)
  return pipeline.create_pretraining_data(inputs, outputs, tokenizer, algorithm.Options(**options),
                                             num_workers=num_workers, progress_seconds=None)


@pytest.fixture(scope="module")
def oracle_cases(tmp_path_factory):
  """Runs every oracle case once; returns case name -> (inputs, output files, options)."""
  tmp = tmp_path_factory.mktemp("oracle")
  sample = os.path.join(shared_data("corpus", "bert-sample"), "sample_text.txt")
  # Alice in Wonderland, the smallest Gutenberg book (151 KB), whole; dupe_factor 1 keeps it ~3 s.
  alice = os.path.join(shared_data("corpus", "gutenberg"), "pg11-alice_in_wonderland.txt")
  # The sample with Windows line ends, a "\r" inside words and the characters str.splitlines()
  # (but not the original's tf.gfile reader) ends lines at: the original drops every "\r".
  line_ends = tmp / "line_ends.txt"
  with open(sample, encoding="utf-8") as f:
    text = f.read()
  for old, new in ((" the ", " th\re "), (". ", ".\u2028 "), (", ", ",\x85"), (" a ", " a\x0b"),
                   (" of ", " o\x1cf ")):
    text = text.replace(old, new, 25)
  line_ends.write_bytes(text.replace("\n", "\r\n").encode("utf-8"))
  cases = {
      "sample_two_files": ([sample], dict(dupe_factor=2), 2, False),
      # A vocabulary that repeats tokens, of 2**15 distinct tokens in 2**15 + 2 lines: the random
      # word is drawn from its 2**15 tokens (vocab.keys()), a 15-bit draw where one over its lines
      # would draw 16 bits, and a repeated token has its later line's id.
      "repeated_tokens": ([sample], dict(dupe_factor=2), 1, _repeating_vocab(tmp)),
      "line_ends": ([str(line_ends)], dict(dupe_factor=1), 1, False),
      "alice": ([alice], dict(dupe_factor=1), 1, False),
      "sample_alice_wwm": ([sample, alice], dict(dupe_factor=1, masking=objectives.Masking(
          do_whole_word_mask=True)), 1, False),
      "alice_short_seq": ([alice], dict(dupe_factor=1, max_seq_length=48, random_seed=7,
                                        masking=objectives.Masking(max_predictions_per_seq=5)),
                          1, False),
  }
  specs, out = [], {}
  for name, (inputs, options, num_outputs, vocab) in cases.items():
    options = algorithm.Options(**options)
    outputs = [str(tmp / f"{name}.{i}.tfrecord") for i in range(num_outputs)]
    specs.append(dict(inputs=inputs, outputs=outputs, vocab=vocab or _vocab_file(),
                      master_vocab=bool(vocab), wwm=options.masking.do_whole_word_mask,
                      max_seq_length=options.max_seq_length, dupe_factor=options.dupe_factor,
                      max_predictions_per_seq=options.max_predictions_per_seq, seed=options.random_seed))
    out[name] = (inputs, outputs, options, vocab or _vocab_file())
  subprocess.run([sys.executable, "-c", ORACLE_DRIVER, json.dumps(specs)], check=True, cwd=REPO,
                 env={**os.environ, "TF_USE_LEGACY_KERAS": "1"})
  return out


@pytest.mark.parametrize("name", ["sample_two_files", "line_ends", "alice", "sample_alice_wwm",
                                  "alice_short_seq", "repeated_tokens"])
def test_same_records_as_original(oracle_cases, tmp_path, name, caplog):
  inputs, oracle_outputs, options, vocab = oracle_cases[name]
  outputs = [str(tmp_path / f"ours.{i}.tfrecord") for i in range(len(oracle_outputs))]
  tokenization._warned_vocabs.discard(vocab)  # pylint: disable=protected-access
  with caplog.at_level("WARNING"):
    stats = pipeline.create_pretraining_data(
        inputs, outputs, tokenization.FullTokenizer(vocab), options, progress_seconds=None)
  repeats = [r.getMessage() for r in caplog.records if "repeats" in r.getMessage()]
  assert bool(repeats) == (name == "repeated_tokens"), repeats  # the warning is kept
  total = 0
  for ours, theirs in zip(outputs, oracle_outputs):
    ours, theirs = _read_records(ours), _read_records(theirs)
    assert len(ours) == len(theirs) > 0
    for i, (a, b) in enumerate(zip(ours, theirs)):
      assert a == b, f"{name}: record {i} differs"
    total += len(ours)
  assert stats["written"] == total


def test_output_does_not_depend_on_workers_and_is_byte_stable(tmp_path, monkeypatch):
  alice = os.path.join(shared_data("corpus", "gutenberg"), "pg11-alice_in_wonderland.txt")
  sample = os.path.join(shared_data("corpus", "bert-sample"), "sample_text.txt")
  monkeypatch.setattr(record_writer, "WRITE_BLOCK", 97)  # many blocks, the last one short
  contents = []
  for run, workers in enumerate([1, 2, 1, 3]):
    outputs = [str(tmp_path / f"run{run}.{i}.tfrecord") for i in range(2)]
    _ours([sample, alice], outputs, num_workers=workers, dupe_factor=1)
    contents.append([open(path, "rb").read() for path in outputs])
  assert contents[0] == contents[1] == contents[2] == contents[3]
  assert sorted(os.listdir(tmp_path)) == sorted(f"run{run}.{i}.tfrecord" for run in range(4) for i in range(2))


@pytest.mark.parametrize("block", [1, 3, 8, 11, 97])
def test_blocks_handed_out_while_making_are_whole_and_in_order(tmp_path, monkeypatch, block):
  # Spool.write finds instance i in block i // _WRITE_BLOCK: every block but the last must be whole.
  monkeypatch.setattr(record_writer, "WRITE_BLOCK", block)
  tokenizer = tokenization.FullTokenizer(_vocab_file())
  corpus = corpus_module.read_corpus([toy_corpus(tmp_path, documents=60)], tokenizer)
  vocab, options = algorithm.Vocab(tokenizer.vocab), algorithm.Options(dupe_factor=3)
  blocks = []
  instances, _ = algorithm.InstanceMaker(corpus, vocab, options, random.Random(1)).create_training_instances(on_block=blocks.append)
  assert [len(b) for b in blocks[:-1]] == [block] * (len(blocks) - 1) and 0 < len(blocks[-1]) <= block
  assert np.array_equal(np.concatenate([b.spans for b in blocks]), instances.spans)
  assert np.array_equal(np.concatenate([b.positions for b in blocks]), instances.positions)
  assert np.array_equal(np.concatenate([b.replacements for b in blocks]), instances.replacements)
  for b in [instances, *blocks]:  # masked positions sorted within each instance, as the original's
    starts = b.mask_starts
    assert all(np.all(np.diff(b.positions[starts[i]:starts[i + 1]].astype(np.int64)) > 0) for i in range(len(b)))


def test_masking_ablation_flags(tmp_path):
  toy = toy_corpus(tmp_path)
  tokenizer = tokenization.FullTokenizer(_vocab_file())
  mask_id = tokenizer.vocab["[MASK]"]
  for probs, check in [((1.0, 0.0, 0.0), lambda ids, labels: np.all(ids == mask_id)),
                       ((0.0, 1.0, 0.0), lambda ids, labels: np.all(ids == labels))]:
    out = str(tmp_path / "ablation.tfrecord")
    _ours([toy], [out], dupe_factor=1, masking=objectives.Masking(
        mask_prob_mask=probs[0], mask_prob_keep=probs[1], mask_prob_random=probs[2]))
    for record in _read_records(out):
      n = int(sum(record["masked_lm_weights"]))
      positions = np.array(record["masked_lm_positions"][:n])
      assert check(np.array(record["input_ids"])[positions], np.array(record["masked_lm_ids"][:n]))
  with pytest.raises(BertTfError, match="sum to 1"):
    _ours([toy], [str(tmp_path / "bad.tfrecord")], masking=objectives.Masking(
        mask_prob_mask=0.8, mask_prob_keep=0.1, mask_prob_random=0.2))
  assert not os.path.exists(tmp_path / "bad.tfrecord")


def test_no_nsp_writes_single_segments(tmp_path):
  toy = toy_corpus(tmp_path)
  out = str(tmp_path / "no_nsp.tfrecord")
  sep_id = tokenization.FullTokenizer(_vocab_file()).vocab["[SEP]"]
  _ours([toy], [out], dupe_factor=2, max_seq_length=64, no_nsp=True)
  records_ = _read_records(out)
  assert records_
  for record in records_:
    length = sum(record["input_mask"])
    assert record["next_sentence_labels"] == [0] and not any(record["segment_ids"])
    unmasked = np.array(record["input_ids"])
    positions = np.array(record["masked_lm_positions"][:int(sum(record["masked_lm_weights"]))])
    unmasked[positions] = np.array(record["masked_lm_ids"])[:len(positions)]
    assert unmasked[length - 1] == sep_id and np.sum(unmasked == sep_id) == 1


def test_masking_statistics_follow_the_flags(tmp_path):
  toy = toy_corpus(tmp_path, documents=200)
  stats = _ours([toy], [str(tmp_path / "stats.tfrecord")], dupe_factor=3)
  assert stats["instances_masked"] == stats["instances_expected_masked"]
  drawn = stats["instances_random_next_drawn"] + stats["instances_actual_next"]
  p = stats["instances_random_next_drawn"] / drawn
  assert abs(p - 0.5) < 5 * (0.25 / drawn) ** 0.5
  p = stats["instances_short_targets"] / stats["instances_documents"]
  assert abs(p - 0.1) < 5 * (0.09 / stats["instances_documents"]) ** 0.5


def test_shards_have_own_seeds_names_and_resume(tmp_path):
  files = []
  for i in range(3):
    path = tmp_path / f"part{i}.txt"
    path.write_text(open(toy_corpus(tmp_path, documents=10, seed=i)).read())
    files.append(str(path))
  tokenizer = tokenization.FullTokenizer(_vocab_file())
  options = algorithm.Options(dupe_factor=1)
  out = str(tmp_path / "out" / "pre.tfrecord")
  os.makedirs(os.path.dirname(out))
  assert pipeline.run_shards(files, [out], tokenizer, options, num_shards=2, shard_index=1) == [1]
  assert os.listdir(tmp_path / "out") == ["pre.tfrecord-00001-of-00002"]
  assert pipeline.run_shards(files, [out], tokenizer, options, num_shards=2) == [0]  # 1 is done
  assert pipeline.run_shards(files, [out], tokenizer, options, num_shards=2) == []
  # Shard 0 (files 0 and 2) is exactly a one-shard run over those files with the derived seed.
  single = str(tmp_path / "single.tfrecord")
  seed = pipeline.shard_seed(12345, 0, 2)
  assert seed == pipeline.shard_seed(12345, 0, 2) != pipeline.shard_seed(12345, 1, 2)
  _ours([files[0], files[2]], [single], dupe_factor=1, random_seed=seed)
  assert open(single, "rb").read() == open(out + "-00000-of-00002", "rb").read()
  with pytest.raises(BertTfError, match="--shard_index"):
    pipeline.run_shards(files, [out], tokenizer, options, num_shards=2, shard_index=2)


def test_awkward_input_is_handled(tmp_path):
  path = tmp_path / "awkward.txt"
  long_line = " ".join(["word"] * 200_000)  # a 1 MB line: one sentence, truncated to the sequence
  path.write_bytes(b"First doc line.\nbad \xff\xfe utf-8 here.\n\n\n\n" + long_line.encode() + b"\n\n"
                   + b"\x0bjoined\x1ctext a\xc2\x85b.\nlast line without newline")
  out = str(tmp_path / "awkward.tfrecord")
  stats = _ours([str(path)], [out], dupe_factor=2, max_seq_length=32,
                masking=objectives.Masking(max_predictions_per_seq=5))
  assert stats["corpus_invalid_utf8_lines"] == 1
  assert stats["corpus_documents"] == 3  # the blank lines between make no empty documents
  assert all(sum(r["input_mask"]) <= 32 for r in _read_records(out))
  # What the original tokenizer makes of the control characters: they join words, not split them.
  tokenizer = tokenization.FullTokenizer(_vocab_file())
  corpus = corpus_module.read_corpus([str(path)], tokenizer, num_workers=2)
  third = corpus.sentence_starts[corpus.document_starts[2]]
  expected = tokenizer.convert_tokens_to_ids(tokenizer.tokenize("joined\x1ctext a\x85b."))
  assert corpus.tokens[third:third + len(expected)].tolist() == expected


def test_bad_input_fails_cleanly(tmp_path, monkeypatch):
  toy = toy_corpus(tmp_path)
  blank = tmp_path / "blank.txt"
  blank.write_text("\n\n  \n")
  with pytest.raises(BertTfError, match="no text"):
    _ours([str(blank)], [str(tmp_path / "o.tfrecord")])
  with pytest.raises(BertTfError, match="--max_predictions_per_seq"):
    _ours([toy], [str(tmp_path / "o.tfrecord")], masking=objectives.Masking(max_predictions_per_seq=0))
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n")
  with pytest.raises(BertTfError, match=r"no \[MASK\]"):
    pipeline.create_pretraining_data([toy], [str(tmp_path / "o.tfrecord")],
                                        tokenization.FullTokenizer(str(vocab)), algorithm.Options())
  # A failure while writing leaves neither the output nor a temporary file behind.
  original_encode_block = record_bytes.RecordEncoder.encode_block
  calls = []

  def failing_encode_block(self, *args):
    calls.append(1)
    if len(calls) > 3:
      raise RuntimeError("disk full")
    return original_encode_block(self, *args)

  monkeypatch.setattr(record_writer, "WRITE_BLOCK", 10)
  monkeypatch.setattr(record_bytes.RecordEncoder, "encode_block", failing_encode_block)
  with pytest.raises(RuntimeError):
    _ours([toy], [str(tmp_path / "w0.tfrecord"), str(tmp_path / "w1.tfrecord")], dupe_factor=5)
  assert len(calls) == 4
  assert not [name for name in os.listdir(tmp_path) if name.startswith("w")]
  # The same with workers serializing while instances are made: no output, no spooled records.
  with pytest.raises(RuntimeError):
    _ours([toy], [str(tmp_path / "w0.tfrecord"), str(tmp_path / "w1.tfrecord")], num_workers=2, dupe_factor=5)
  assert not [name for name in os.listdir(tmp_path) if "w0" in name or "w1" in name]
  # A worker that dies (as if killed) fails the run instead of leaving it waiting.
  monkeypatch.setattr(record_writer, "_spool_block", _die)
  with pytest.raises(RuntimeError, match="serializing records died"):
    _ours([toy], [str(tmp_path / "w0.tfrecord")], num_workers=2, dupe_factor=5)
  assert not [name for name in os.listdir(tmp_path) if "w0" in name]
  # The same when the death is seen by the next submit rather than by a result (a race above).
  submit = workers.ForkedWorkers.submit

  def submit_and_wait(self, *args):
    future = submit(self, *args)
    concurrent.futures.wait([future])
    return future

  with monkeypatch.context() as m:
    m.setattr(workers.ForkedWorkers, "submit", submit_and_wait)
    with pytest.raises(RuntimeError, match="serializing records died"):
      _ours([toy], [str(tmp_path / "w0.tfrecord")], num_workers=2, dupe_factor=5)
  assert not [name for name in os.listdir(tmp_path) if "w0" in name]
  # Or while tokenizing the input.
  monkeypatch.setattr(corpus_module, "tokenize_chunk", _die_reading)
  with pytest.raises(RuntimeError, match="tokenizing the input died"):
    _ours([toy], [str(tmp_path / "w0.tfrecord")], num_workers=2, dupe_factor=5)
  assert not [name for name in os.listdir(tmp_path) if "w0" in name]
  # And one that dies while copying its share of the records out.
  monkeypatch.undo()
  monkeypatch.setattr(record_writer, "WRITE_BLOCK", 10)
  monkeypatch.setattr(record_writer, "_copy_spooled", functools.partial(_copy_or_die, os.getpid()))
  with pytest.raises(RuntimeError, match="copying records out died"):
    _ours([toy], [str(tmp_path / "w0.tfrecord"), str(tmp_path / "w1.tfrecord")], num_workers=2, dupe_factor=5)
  assert not [name for name in os.listdir(tmp_path) if "w0" in name or "w1" in name]


def _die(state, index, block):
  os._exit(1)  # a worker killed while serializing


def _die_reading(tokenizer, chunk):
  os._exit(1)  # a worker killed while tokenizing


_COPY_SPOOLED = record_writer._copy_spooled


def _copy_or_die(main_process_id, *args):
  if os.getpid() != main_process_id:
    os._exit(1)  # a worker killed while copying records out
  return _COPY_SPOOLED(*args)


def _script(*args):
  return run_script("create_pretraining_data.py", *args)


def test_script_runs_and_reports_bad_flags_in_one_line(tmp_path):
  toy = toy_corpus(tmp_path)
  out = str(tmp_path / "script.tfrecord")
  common = [f"--vocab_file={_vocab_file()}", f"--output_file={out}", "--dupe_factor=1"]
  result = _script(f"--input_file={toy}", *common, "--num_workers=2")
  assert result.returncode == 0, result.stderr
  records.check_record_shapes(out, records.pretraining_features(128, 20))
  result = _script(f"--input_file={tmp_path}/missing*.txt", *common)
  assert result.returncode == 1 and result.stderr.strip().splitlines()[-1].startswith(
      "error: --input_file:"), result.stderr


def test_url_paths_go_through_tf_gfile(tmp_path):
  # ram:// is TensorFlow's in-memory file system: a stand-in for gs:// here.
  sample = os.path.join(shared_data("corpus", "bert-sample"), "sample_text.txt")
  tf.io.gfile.makedirs("ram://cpd_test")
  tf.io.gfile.copy(sample, "ram://cpd_test/input.txt", overwrite=True)
  inputs = fileio.input_files("ram://cpd_test/*.txt")
  assert inputs == ["ram://cpd_test/input.txt"]
  local = str(tmp_path / "local.tfrecord")
  _ours([sample], [local], dupe_factor=2)
  for workers in (1, 2):
    out = f"ram://cpd_test/out{workers}.tfrecord"
    _ours(inputs, [out], num_workers=workers, dupe_factor=2)
    with tf.io.gfile.GFile(out, "rb") as f, open(local, "rb") as g:
      assert f.read() == g.read()
  assert sorted(tf.io.gfile.listdir("ram://cpd_test")) == ["input.txt", "out1.tfrecord", "out2.tfrecord"]


def test_script_does_not_import_tensorflow(tmp_path):
  # Importing TensorFlow takes seconds, longer than making a small corpus's records.
  toy = toy_corpus(tmp_path)
  out = str(tmp_path / "no_tf.tfrecord")
  argv = ["create_pretraining_data.py", f"--input_file={toy}", f"--output_file={out}",
          f"--vocab_file={_vocab_file()}", "--dupe_factor=1", "--num_workers=2"]
  driver = ("import runpy, sys\n"
            f"sys.argv = {argv!r}\n"
            "try:\n  runpy.run_path('create_pretraining_data.py', run_name='__main__')\n"
            "except SystemExit as e:\n  assert not e.code, e.code\n"
            "print('tensorflow' in sys.modules)\n")
  result = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, cwd=REPO)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "False"
  assert len(_read_records(out)) > 0


def test_fast_shuffle_and_randint_draw_like_random():
  for n in [0, 1, 2, 3, 4, 5, 8, 9, 17, 125, 4097]:
    ours, theirs = random.Random(n), random.Random(n)
    x, y = list(range(n)), list(range(n))
    algorithm._shuffle(x, ours)
    theirs.shuffle(y)
    assert x == y
    assert [algorithm._randint(ours, 0, n) for _ in range(20)] == [theirs.randint(0, n) for _ in range(20)]
    assert ours.random() == theirs.random()

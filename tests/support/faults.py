"""The tiny worlds the fault tests run scripts against (test_faults.py: bad input and kills;
test_faults_runs.py: run-state faults). Each is made once a module: a vocabulary, a config,
MRPC-format data, then the runs its cases start from; the cases run as subprocesses, two at a
time, each in a directory of its own under the world's cases/."""
import concurrent.futures
import json
import struct

import numpy as np

from support.script_runner import run_script

# The run-state worlds' (test_faults_runs.py, test_faults_resume.py) words, vocabulary and config.
RUN_WORDS = ["the", "dog", "is", "hairy", "cat", "sat", "on", "a", "mat", "it", "not", "big",
             "red", "ran", "far", "away", "home", "and", "then", "slept"]
RUN_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", ","] + RUN_WORDS
RUN_CONFIG = {"vocab_size": len(RUN_VOCAB), "hidden_size": 16, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 32, "hidden_act": "gelu",
              "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
              "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}


def write_json(path, obj):
  path.write_text(json.dumps(obj))
  return str(path)


def sentence(rng, n, words):
  """n of the words (word pieces left out) and a full stop."""
  return " ".join(rng.choice([w for w in words if not w.startswith("##")], n)) + " ."


def mrpc(root, words, rows, dev_label=None):
  """MRPC-format train/dev/test.tsv of `rows` sentence pairs (the same in each split; dev's fourth
  row labelled dev_label when given) in root."""
  rng = np.random.RandomState(0)
  root.mkdir(parents=True)
  header = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
  lines = [f"{i % 2}\t{i}\t{i}\t{sentence(rng, 4, words)}\t{sentence(rng, 5, words)}\n"
           for i in range(rows)]
  for split in ("train", "dev", "test"):
    rows_here = list(lines)
    if split == "dev" and dev_label is not None:
      rows_here[3] = f"{dev_label}" + rows_here[3][1:]
    (root / f"{split}.tsv").write_text(header + "".join(rows_here))
  return str(root)


def make_world(root, vocab, config, words, mrpc_rows):
  """The start of a world in root: vocab.txt, bert_config.json and MRPC data ->
  {"root", "vocab", "config", "mrpc"}."""
  (root / "vocab.txt").write_text("\n".join(vocab) + "\n")
  return {"root": root, "vocab": str(root / "vocab.txt"),
          "config": write_json(root / "bert_config.json", config),
          "mrpc": mrpc(root / "mrpc", words, mrpc_rows)}


def pretraining_records(path, seq_lengths, vocab_size, seed=0):
  """A record file of one pretraining record per entry of seq_lengths (5 predictions each)."""
  from bert_tf.data import records  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(seed)

  def record(length):
    ids = [2] + list(rng.randint(7, vocab_size, length - 2)) + [3]
    return {"input_ids": ids, "input_mask": [1] * length, "segment_ids": [0] * length,
            "masked_lm_positions": [1, 2, 3, 4, 5], "masked_lm_ids": ids[1:6],
            "masked_lm_weights": [1.0] * 5, "next_sentence_labels": [int(rng.randint(2))]}

  records.write_records(str(path), [record(n) for n in seq_lengths])
  return str(path)


def bundle_index(num_shards=1):
  """The bytes of a checkpoint .index that holds no tensor, of num_shards .data shards: TensorFlow's
  table format (LevelDB's), as bert_tf.io.integrity reads it, for tests that list checkpoints."""
  from bert_tf.io import integrity  # pylint: disable=g-import-not-at-top

  def block(key, value):  # one entry, one restart point, then the type byte and checksum
    body = bytes([0, len(key), len(value)]) + key + value + struct.pack("<II", 0, 1)
    checksum = integrity._masked_crc32c(body + b"\0")  # pylint: disable=protected-access
    return body + b"\0" + struct.pack("<I", checksum)

  data = block(b"", bytes([0x08, num_shards]))  # BundleHeaderProto.num_shards
  handle = bytes([0, len(data) - 5])  # offset 0, size without the trailer
  index = block(b"\xff", handle)
  footer = bytes([0, 0, len(data), len(index) - 5]).ljust(40, b"\0") + struct.pack(
      "<Q", 0xdb4775248b80fb57)
  return data + index + footer


def _succeeds(script, args):
  done = run_script(script, *args, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]


def run_all(runs, parallel=2):
  """Runs the (script, args) pairs, two at a time (parallel=1: in turn, each once the one before
  it has succeeded); each must succeed."""
  if parallel == 1:
    for script, args in runs:
      _succeeds(script, args)
    return
  with concurrent.futures.ThreadPoolExecutor(parallel) as pool:
    list(pool.map(lambda run: _succeeds(*run), runs))


def run_cases(world, cases, one):
  """one(name) for every case, two at a time, after making the world's cases/ directory:
  {name: what one returned}."""
  (world["root"] / "cases").mkdir()
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return dict(pool.map(one, cases))


def alive(pid):
  """Running (a zombie, dead but not yet reaped by this container's init, does not count)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except OSError:
    return False

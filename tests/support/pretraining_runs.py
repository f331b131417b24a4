"""The tiny pretrainer: its config, records shaped like create_pretraining_data's, and
run_pretraining.py commands run as subprocesses with their eval_results.txt read back."""
import collections
import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

from bert_tf.data import records
from support.paths import REPO
from support.tiny import SIZES
from support.tiny import bert_config

SEQ, PREDS, VOCAB = 16, 4, 50
SCRIPT = os.path.join(REPO, "run_pretraining.py")
CONFIG = {"vocab_size": VOCAB, **SIZES, "max_position_embeddings": SEQ}  # bert_config.json's


def tiny_config(dropout=0.1):
  return bert_config(VOCAB, max_position_embeddings=SEQ, hidden_dropout_prob=dropout,
                     attention_probs_dropout_prob=dropout)


def write_pretraining_records(path, num_examples, seq_length=SEQ, max_predictions=PREDS,
                              vocab_size=VOCAB, seed=0, min_length=None):
  """Records shaped like create_pretraining_data's: some [MASK] (id 4) inputs, padded tails;
  min_length tokens at least (default: half of seq_length)."""
  rng = np.random.RandomState(seed)
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(num_examples):
      length = rng.randint(min_length or seq_length // 2, seq_length + 1)
      ids = rng.randint(5, vocab_size, length).tolist()
      num_predictions = rng.randint(1, max_predictions + 1)
      positions = sorted(rng.choice(np.arange(1, length), num_predictions, replace=False).tolist())
      labels = [ids[p] for p in positions]
      for p in positions:
        ids[p] = 4
      pad = seq_length - length
      pred_pad = max_predictions - num_predictions
      writer.write(records.serialize(collections.OrderedDict(
          input_ids=ids + [0] * pad, input_mask=[1] * length + [0] * pad,
          segment_ids=[0] * (length // 2) + [1] * (length - length // 2) + [0] * pad,
          masked_lm_positions=positions + [0] * pred_pad, masked_lm_ids=labels + [0] * pred_pad,
          masked_lm_weights=[1.0] * num_predictions + [0.0] * pred_pad,
          next_sentence_labels=[int(rng.randint(2))])))
  return path


def write_config(tmp_path, **overrides):
  path = str(tmp_path / "bert_config.json")
  with open(path, "w") as f:
    json.dump(dict(CONFIG, **overrides), f)
  return path


def command(tmp_path, output_dir, *extra, seq=16, preds=4, records=None):
  if records is None:
    records = str(tmp_path / f"records_{seq}.tfrecord")
    if not os.path.exists(records):
      write_pretraining_records(records, 48, seq_length=seq, max_predictions=preds)
  return [sys.executable, SCRIPT, f"--bert_config_file={write_config(tmp_path)}",
          f"--input_file={records}", f"--output_dir={output_dir}", f"--max_seq_length={seq}",
          f"--max_predictions_per_seq={preds}", "--train_batch_size=8", "--eval_batch_size=8",
          "--learning_rate=1e-3", "--num_warmup_steps=3", "--max_eval_steps=3", "--log_steps=1",
          *extra]


def run(cmd, timeout=240):
  result = subprocess.run(["timeout", "-k", "10", str(timeout)] + cmd, cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  return result.returncode, result.stdout


def start(cmd, stderr=subprocess.STDOUT):
  return subprocess.Popen(["timeout", "-k", "10", "240"] + cmd, cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=stderr)


def read_eval_results(output_dir):
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    return dict(line.strip().split(" = ") for line in f)

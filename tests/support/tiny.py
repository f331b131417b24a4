"""The tiny encoder's sizes, and the tiny fine-tuning set-up the script tests share: a 20-word
vocabulary, a 2-layer config, the flags every fine-tuning script takes, and eval_results.txt read
back and compared."""
import json
import os

import pytest

from bert_tf.model.config import BertConfig

# The tiny encoder of most tests (those that need other sizes say so).
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
         "intermediate_size": 37}
TINY = dict(SIZES, max_position_embeddings=64, type_vocab_size=2)
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "fine", "awful", "the",
         "movie", "film", "plot", "was", "is", "a", "very", "really", "story", "acting"]


def bert_config(vocab_size, **overrides):
  """A BertConfig of the tiny sizes, with the overrides (max_position_embeddings, ...)."""
  return BertConfig(vocab_size=vocab_size, **dict(SIZES, **overrides))


def write_config(path, vocab_size):
  path.write_text(json.dumps(dict(TINY, vocab_size=vocab_size)))
  return str(path)


def write_vocab(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(WORDS) + "\n")
  return str(path)


def read_results(output_dir):
  results = {}
  with open(os.path.join(output_dir, "eval_results.txt")) as f:
    for line in f:
      key, value = line.strip().split(" = ")
      results[key] = float(value)
  return results


def common_args(data_dir, vocab, config, output_dir):
  return [f"--data_dir={data_dir}", f"--vocab_file={vocab}", f"--bert_config_file={config}",
          f"--output_dir={output_dir}", "--max_seq_length=32", "--seed=7"]


def close(packed, unpacked):
  """The same results (global_step aside: a checkpoint's, or 0 from --init_checkpoint)."""
  assert set(packed) == set(unpacked)
  for key, value in unpacked.items():
    if key == "global_step":
      continue
    assert packed[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key

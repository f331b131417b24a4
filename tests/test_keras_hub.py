"""keras-hub presets in and out, against keras-hub itself (Keras 3, in a process of its own):
a preset BertBackbone.save_to_preset wrote reads in bert_tf with keras-hub's outputs and
converts to TF1 with its config and vocabulary beside; bert_tf's --output_format=keras_hub loads
as BertBackbone (bert_tf's outputs) and as BertTextClassifier, whose tokenizer gives
FullTokenizer's ids and which fine-tunes."""
import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.model import checkpoints
from bert_tf.model import model_files
from bert_tf.model.model_options import ModelOptions
from bert_tf.model import modeling
from bert_tf.model.config import BertConfig
from bert_tf.text import tokenization
from support.hub_modules import keras_hub_run
from support.models import randomize
from support.script_runner import run_script
from support.tiny import TINY, WORDS, write_vocab

TOLERANCE = 1e-5  # max abs difference, hidden states and pooled output
CONFIG = BertConfig(vocab_size=len(WORDS), **TINY)
SENTENCES = ["the movie was GOOD", "a very bad plot really", "fine acting , awful story"]
SIZES = {"vocabulary_size": len(WORDS), "num_layers": TINY["num_hidden_layers"],
         "num_heads": TINY["num_attention_heads"], "hidden_dim": TINY["hidden_size"],
         "intermediate_dim": TINY["intermediate_size"],
         "max_sequence_length": TINY["max_position_embeddings"],
         "num_segments": TINY["type_vocab_size"]}


def max_diff(a, b, mask=None):
  """Max abs difference; of hidden states [B, T, H], over the real tokens of `mask`."""
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  if mask is not None:
    a, b = a[np.asarray(mask, bool)], b[np.asarray(mask, bool)]
  return float(np.max(np.abs(a - b)))


def close(theirs, mine, mask):
  """keras-hub's outputs are bert_tf's: the pooled output, and the hidden states of real tokens."""
  assert max_diff(theirs["pooled_output"], mine["pooled_output"]) < TOLERANCE
  assert max_diff(theirs["sequence_output"], mine["sequence_output"], mask) < TOLERANCE


def write_inputs(directory):
  """Two rows of ids (the second padded), two segments, beside keras-hub's outputs."""
  ids = np.array([[2, 9, 10, 13, 5, 3, 6, 3], [2, 15, 6, 3, 7, 7, 7, 7]], np.int32)
  mask = np.array([[1] * 8, [1] * 4 + [0] * 4], np.int32)
  segments = np.array([[0] * 6 + [1] * 2, [0] * 8], np.int32)
  np.savez(directory / "inputs.npz", input_ids=ids, input_mask=mask, segment_ids=segments)
  return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask),
          "segment_ids": tf.constant(segments)}


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
  """bert_tf's preset of a random BERT (heads included), and one keras-hub wrote of its own
  random BertBackbone; keras-hub's outputs on both (one keras-hub process)."""
  root = tmp_path_factory.mktemp("presets")
  features = write_inputs(root)
  model = randomize(modeling.BertPretrainer(CONFIG), seed=5)
  tf1 = root / "tf1" / "bert_model.ckpt"
  checkpoints.save_tf1_checkpoint(model, str(tf1))
  CONFIG.to_json_file(str(tf1.parent / "bert_config.json"))
  write_vocab(tf1.parent)
  run = run_script("convert_checkpoint.py", f"--input={tf1}", f"--output={root / 'ours'}",
                   "--output_format=keras_hub")
  assert run.returncode == 0, run.stderr[-3000:]
  losses = keras_hub_run(root / "ours", root / "theirs", root, SIZES, tf1.parent / "vocab.txt",
                         SENTENCES)
  return {"root": root, "features": features, "model": model, "tf1": tf1, "run": run,
          "losses": losses}


def test_a_keras_hub_preset_reads_with_keras_hubs_outputs(presets, tmp_path):
  preset = presets["root"] / "theirs"
  files = model_files.open_model(ModelOptions(init_checkpoint=str(preset),
                                                        given=frozenset()))
  assert files.described.format == "keras_hub" and files.described.authoritative
  assert files.config == CONFIG and files.do_lower_case is True
  assert tokenization.load_vocab(files.vocab_file) == tokenization.load_vocab(
      str(presets["tf1"].parent / "vocab.txt"))
  ours = modeling.BertModel(files.config)
  loaded = checkpoints.init_from_checkpoint(ours, str(preset))
  assert not loaded.not_found and not loaded.unused
  close(np.load(presets["root"] / "theirs.npz"), ours(presets["features"]),
        presets["features"]["input_mask"])

  # --input=PRESET: a TF1 model directory, bit for bit (the script's way is the fixture's).
  tf1 = tmp_path / "tf1" / "bert_model.ckpt"
  checkpoints.convert_checkpoint(str(preset), str(tf1), output_format="tf1")
  assert BertConfig.from_json_file(str(tf1.parent / "bert_config.json")) == CONFIG
  assert (tf1.parent / "vocab.txt").read_text() == "\n".join(WORDS) + "\n"
  reader = tf.train.load_checkpoint(str(tf1))
  for name, variable in checkpoints.checkpoint_variables(ours).items():
    np.testing.assert_array_equal(reader.get_tensor(name), variable.numpy())


def test_bert_tfs_preset_loads_in_keras_hub(presets):
  preset = presets["root"] / "ours"
  assert "no pretraining heads" in presets["run"].stderr
  assert sorted(p.name for p in preset.iterdir()) == [
      "assets", "config.json", "metadata.json", "model.weights.h5", "tokenizer.json"]
  assert presets["losses"][-1] < presets["losses"][0]
  close(np.load(presets["root"] / "ours.npz"), presets["model"].encoder(presets["features"]),
        presets["features"]["input_mask"])
  tokenizer = tokenization.FullTokenizer(str(presets["tf1"].parent / "vocab.txt"))
  for row, sentence in zip(np.load(presets["root"] / "tokens.npy"), SENTENCES):
    ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(sentence))
    assert row[:len(ids)].tolist() == ids and not row[len(ids):].any()

  back = modeling.BertModel(CONFIG)
  loaded = checkpoints.init_from_checkpoint(back, str(preset))
  assert not loaded.not_found
  for a, b in zip(back.variables, presets["model"].encoder.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_what_keras_hub_cannot_hold_is_one_line(tmp_path):
  relu = BertConfig.from_dict(dict(CONFIG.to_dict(), hidden_act="relu"))
  tf1 = tmp_path / "relu" / "bert_model.ckpt"
  checkpoints.save_tf1_checkpoint(modeling.BertModel(relu), str(tf1))
  relu.to_json_file(str(tf1.parent / "bert_config.json"))
  write_vocab(tf1.parent)
  with pytest.raises(BertTfError, match="GELU"):
    checkpoints.convert_checkpoint(str(tf1), str(tmp_path / "kh"), output_format="keras_hub")
  assert not (tmp_path / "kh").exists()
  other = tmp_path / "other"
  other.mkdir()
  (other / "config.json").write_text(json.dumps({"registered_name": "keras_hub>GemmaBackbone",
                                                 "config": {}}))
  (other / "model.weights.h5").write_bytes(b"")
  with pytest.raises(BertTfError, match="GemmaBackbone, not of keras_hub>BertBackbone"):
    checkpoints.convert_checkpoint(str(other), str(tmp_path / "x"), output_format="tf1")

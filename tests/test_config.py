import json
import re

import pytest
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.model.config import BertConfig
from bert_tf.model.config import check_max_seq_length


def test_legacy_keras_is_active():
  assert tf.keras.Model is tf_keras.Model


def _write(tmp_path, obj):
  path = tmp_path / "bert_config.json"
  path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)
  return str(path)


BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
            attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=2,
            initializer_range=0.02)


def test_round_trip(tmp_path):
  config = BertConfig.from_json_file(_write(tmp_path, BASE))
  assert config.to_dict() == BASE
  out = str(tmp_path / "out.json")
  config.to_json_file(out)
  assert BertConfig.from_json_file(out) == config
  assert config.head_size == 64


@pytest.mark.parametrize("change,message", [
    (dict(hidden_size="768"), "field hidden_size must be int"),
    (dict(hidden_dropout_prob="x"), "hidden_dropout_prob must be float"),
    (dict(num_attention_heads=7), "not a multiple of num_attention_heads"),
    (dict(hidden_act="swishy"), "hidden_act"),
    (dict(vocab_size=True), "vocab_size must be int"),
])
def test_bad_fields_name_the_file_and_field(tmp_path, change, message):
  path = _write(tmp_path, dict(BASE, **change))
  with pytest.raises(BertTfError, match=message) as info:
    BertConfig.from_json_file(path)
  assert path in str(info.value)


def test_missing_field_and_file_and_bad_json(tmp_path):
  obj = dict(BASE)
  del obj["vocab_size"]
  with pytest.raises(BertTfError, match="missing field.*vocab_size"):
    BertConfig.from_json_file(_write(tmp_path, obj))
  with pytest.raises(BertTfError, match="not found"):
    BertConfig.from_json_file(str(tmp_path / "nope.json"))
  with pytest.raises(BertTfError, match="not valid JSON"):
    BertConfig.from_json_file(_write(tmp_path, "{"))


def test_hugging_face_keys_are_ignored():
  config = BertConfig.from_dict(dict(BASE, model_type="bert", pad_token_id=0))
  assert config.vocab_size == 30522


@pytest.mark.parametrize("hf_name,ours", [
    ("gelu", "gelu_exact"), ("gelu_python", "gelu_exact"), ("gelu_new", "gelu"),
    ("gelu_pytorch_tanh", "gelu"), ("gelu_fast", "gelu"), ("gelu_accurate", "gelu"),
    ("relu", "relu"), ("tanh", "tanh"), ("silu", "silu")])
def test_hugging_face_activation_names_mean_what_transformers_means(tmp_path, hf_name, ours):
  # A config.json with "model_type" (transformers writes it) names activations as transformers
  # does: its "gelu" is the exact erf form, our "gelu_exact".
  config = BertConfig.from_json_file(_write(tmp_path, dict(BASE, hidden_act=hf_name,
                                                           model_type="bert")))
  assert config.hidden_act == ours
  assert BertConfig.from_dict(dict(BASE, hidden_act=hf_name), hugging_face=True).hidden_act == ours


def test_activation_names_written_for_transformers():
  # Ours -> transformers' names that compute the same function, and back.
  expected = {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu", "relu": "relu",
              "tanh": "tanh", "linear": "linear", "silu": "silu", "swish": "swish"}
  for ours, theirs in expected.items():
    config = BertConfig.from_dict(dict(BASE, hidden_act=ours))
    assert config.to_hf_dict()["hidden_act"] == theirs
    assert config.to_dict()["hidden_act"] == ours
    back = BertConfig.from_dict(dict(config.to_hf_dict(), model_type="bert"))
    assert back.hidden_act in (ours, "gelu" if ours == "gelu_new" else ours)


def test_original_activation_names_keep_working():
  # The original's get_activation lower-cases the name and reads "" as linear.
  for name in ("gelu", "GELU", "Relu", "tanh", "linear", ""):
    assert BertConfig.from_dict(dict(BASE, hidden_act=name)).hidden_act == name


def test_unknown_hugging_face_activation_names_the_file(tmp_path):
  path = _write(tmp_path, dict(BASE, hidden_act="quick_gelu", model_type="bert"))
  with pytest.raises(BertTfError, match="hidden_act 'quick_gelu'.*transformers") as info:
    BertConfig.from_json_file(path)
  assert path in str(info.value)


@pytest.mark.parametrize("max_seq_length, message", [
    (4, "--max_seq_length: expected an integer of at least 5 ([CLS] A [SEP] B [SEP]), got 4"),
    (513, "--max_seq_length: cannot use sequence length 513 because the BERT model was only "
     "trained up to sequence length 512"),
])
def test_the_one_max_seq_length_rule(max_seq_length, message):
  with pytest.raises(BertTfError, match=re.escape(message)):
    check_max_seq_length(max_seq_length, BertConfig(**BASE).max_position_embeddings)
  check_max_seq_length(5, 512)
  check_max_seq_length(512, 512)

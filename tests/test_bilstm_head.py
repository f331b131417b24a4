"""--bilstm_head (the paper's Table 5 "+ BiLSTM"): the heads' shapes and names, padding that
changes no output, a causal encoder, an init checkpoint without the BiLSTM, and run_classifier,
run_ner and run_squad end to end with it (trained, evaluated, served: the run's own predictions).
Each run is served in this process by export.build_server, the server --export_dir saves
(run_classifier's from the best weights it kept). None is saved as a SavedModel: a keras LSTM's
save and load take a minute or more on CPU; the round trip is test_export's and test_keep_best's
(--export_dir of the best weights), with models without a BiLSTM."""
import json
import random

import numpy as np
import pytest
import tensorflow as tf
import tf_keras

from bert_tf.model import checkpoints
from bert_tf.model.config import BertConfig
from bert_tf.model import heads
from bert_tf.serving import export
from bert_tf.serving import predictor
from support.script_runner import run_script
from support.paths import shared_data
from support.models import HEADS_CONFIG as CONFIG
from support.models import random_inputs
from support.task_data import conll_sentence, small_vocab, synthetic_sst2, write_conll
from support.tiny import WORDS, common_args, write_config, write_vocab

UNITS = 8


def _models(**kwargs):
  return {"classifier": heads.BertClassifier(CONFIG, 3, bilstm_units=UNITS, **kwargs),
          "squad": heads.BertSpanLabeler(CONFIG, bilstm_units=UNITS, **kwargs),
          "ner": heads.BertTokenClassifier(CONFIG, 5, bilstm_units=UNITS, **kwargs)}


def test_shapes_names_and_float32_under_mixed_precision():
  tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    models = _models()
  finally:
    tf_keras.mixed_precision.set_global_policy("float32")
  inputs = random_inputs([6, 4], 8)
  assert models["classifier"](inputs)["logits"].shape == (2, 3)
  assert models["squad"](inputs)["start_logits"].shape == (2, 8)
  assert models["ner"](inputs)["logits"].shape == (2, 8, 5)
  for model in models.values():
    head = list(checkpoints.task_head_variables(model))
    assert head[:6] == [f"bilstm/{direction}_lstm/lstm_cell/{name}" for direction in
                        ("forward", "backward") for name in ("kernel", "recurrent_kernel", "bias")]
    assert model.bilstm.forward_layer.compute_dtype == "float32"
  assert models["ner"](inputs)["logits"].dtype == tf.float32
  # The output layers read the BiLSTM's 2 * UNITS outputs, under the original's names.
  assert models["squad"].span_head.output_weights.name == "cls/squad/output_weights:0"
  assert models["squad"].span_head.output_weights.shape == (2, 2 * UNITS)
  assert models["classifier"].classifier.output_weights.shape == (3, 2 * UNITS)


@pytest.mark.parametrize("causal", [False, True])
def test_padding_changes_no_output(causal):
  tf.random.set_seed(3)
  models = _models(causal=causal)
  trimmed = _models(causal=causal, trim_padding=True)
  lengths = [7, 3]
  short, padded = random_inputs(lengths, 8, seed=1), random_inputs(lengths, 12, seed=2)
  # The same real ids, other padding ids and more padding positions.
  padded["input_ids"] = tf.concat([short["input_ids"], padded["input_ids"][:, 8:]], axis=1)
  padded["input_ids"] = tf.where(padded["input_mask"] > 0, padded["input_ids"], 17)
  for task, model in models.items():
    trimmed[task].set_weights(model.get_weights())
    a, b, c = model(short), model(padded), trimmed[task](padded)
    for name in a:
      if task == "classifier":
        np.testing.assert_allclose(a[name], b[name], atol=1e-5)
        np.testing.assert_allclose(c[name], b[name], atol=1e-5)
        continue
      for row, length in enumerate(lengths):
        np.testing.assert_allclose(a[name][row, :length], b[name][row, :length], atol=1e-5)
        np.testing.assert_allclose(c[name][row, :length], b[name][row, :length], atol=1e-5)
  # The classifier reads the forward LSTM at the last real token, which has read them all: the
  # first token changes its logits even with a causal encoder.
  other = dict(short, input_ids=tf.tensor_scatter_nd_update(short["input_ids"], [[0, 1]], [9]))
  changed = models["classifier"](other)["logits"] - models["classifier"](short)["logits"]
  assert np.abs(changed[0]).max() > 1e-6 and np.abs(changed[1]).max() == 0


def test_init_checkpoint_without_bilstm_loads_and_bilstm_is_new(tmp_path):
  plain = heads.BertClassifier(CONFIG, 3)
  plain(random_inputs([4], 6))
  prefix = str(tmp_path / "bert_model.ckpt")
  checkpoints.save_tf1_checkpoint(plain, prefix)  # the encoder alone, as a pre-trained release
  assert checkpoints.bilstm_units(prefix) is None
  values = []
  for seed in (5, 5, 6):
    tf_keras.utils.set_random_seed(seed)
    model = heads.BertClassifier(CONFIG, 3, bilstm_units=UNITS)
    initial = [v.numpy() for v in model.bilstm.variables]
    result = checkpoints.init_from_checkpoint(model, prefix)
    assert not result.head and not result.not_found
    np.testing.assert_array_equal(model.encoder.variables[0], plain.encoder.variables[0])
    for variable, value in zip(model.bilstm.variables, initial):
      np.testing.assert_array_equal(variable, value)  # left as initialised
    values.append(initial[0])
  # The BiLSTM's initialization follows the seed.
  np.testing.assert_array_equal(values[0], values[1])
  assert not np.allclose(values[0], values[2])
  tf.train.Checkpoint(model=model).save(str(tmp_path / "tuned" / "ckpt"))
  assert checkpoints.bilstm_units(str(tmp_path / "tuned")) == UNITS


def _check_ok(result):
  assert result.returncode == 0, result.stderr[-3000:]


def test_run_classifier_with_bilstm_keeps_best_and_serves_its_predictions(tmp_path):
  vocab = write_vocab(tmp_path)
  config = write_config(tmp_path / "bert_config.json", len(WORDS))
  synthetic_sst2(tmp_path / "data", seed=1, n=256)
  # A pre-trained model to start from, without a BiLSTM.
  tf_keras.utils.set_random_seed(0)
  encoder = export.build_model("classifier", BertConfig.from_json_file(config), 2)
  checkpoints.save_tf1_checkpoint(encoder, str(tmp_path / "init" / "bert_model.ckpt"))
  output_dir = tmp_path / "out"
  args = [*common_args(tmp_path / "data", vocab, config, output_dir), "--task_name=SST-2"]
  # Two evaluations (steps 32 and 48: each traces the BiLSTM anew), each split in one batch.
  result = run_script(
      "run_classifier.py", *args, "--bilstm_head", "--bilstm_hidden_size=8", "--do_train",
      "--do_predict", f"--init_checkpoint={tmp_path / 'init' / 'bert_model.ckpt'}",
      "--train_batch_size=16", "--num_train_epochs=3", "--learning_rate=2e-3",
      "--eval_every_n_steps=32", "--keep_best_metric=eval_accuracy", "--eval_batch_size=64",
      "--predict_batch_size=16")
  _check_ok(result)
  # The best weights learned the task, and are not the last (step 48's do as well, no better).
  best = json.loads((output_dir / "best" / "best.json").read_text())
  assert best["metric"] == "eval_accuracy" and best["value"] >= 0.9 and best["step"] == 32
  # What --export_dir saves, the server of the best weights, gives the probabilities --do_predict
  # wrote: it predicted with them too.
  server = export.build_server("classifier", BertConfig.from_json_file(config), vocab, True,
                               str(output_dir / "best"), 32, label_list=["0", "1"], pair=False)
  texts = [line.split("\t")[1] for line in
           (tmp_path / "data" / "test.tsv").read_text().splitlines()[1:]]
  np.testing.assert_allclose(server.serve(tf.constant(texts))["probabilities"],
                             np.loadtxt(output_dir / "test_results.tsv"), atol=1e-5)
  # Evaluating the run without --bilstm_head is refused, not read wrongly.
  refused = run_script("run_classifier.py", *args, "--do_eval")
  assert refused.returncode != 0
  assert "--bilstm_head: " in refused.stderr and "--bilstm_hidden_size=8" in refused.stderr


def _tags(path):
  return [line.split()[-1] for line in path.read_text().splitlines()
          if line and not line.startswith("-DOCSTART-")]


def test_run_ner_with_bilstm_and_its_predictor(tmp_path):
  rng = random.Random(0)
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  write_conll(data_dir / "train.txt", [conll_sentence(rng, rng.randint(3, 9)) for _ in range(160)])
  write_conll(data_dir / "valid.txt", [conll_sentence(rng, rng.randint(3, 9)) for _ in range(30)])
  test_sentences = ([conll_sentence(rng, 30)] +
                    [conll_sentence(rng, rng.randint(3, 9)) for _ in range(10)])
  write_conll(data_dir / "test.txt", test_sentences)
  words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "john", "mary", "peter", "anna", "paris", "london",
           "berlin", "rome", "the", "visited", "met", "in", "and", "today", "a", "city", "went",
           "to"]
  (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
  BertConfig(vocab_size=len(words), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=37, max_position_embeddings=64).to_json_file(
                 str(tmp_path / "bert_config.json"))
  output_dir = tmp_path / "out"
  result = run_script(
      "run_ner.py", f"--data_dir={data_dir}", f"--vocab_file={tmp_path / 'vocab.txt'}",
      f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--output_dir={output_dir}",
      "--max_seq_length=16", "--train_batch_size=8", "--learning_rate=3e-3", "--do_train",
      "--do_predict", "--predict_batch_size=32", "--num_train_epochs=3", "--bilstm_head")
  _check_ok(result)
  # It learns: the test sentences' scores (--do_predict scores them as --do_eval the dev set; no
  # --do_eval, which would trace the BiLSTM once more).
  results = dict(line.split(" = ") for line in
                 (output_dir / "test_results.txt").read_text().splitlines())
  assert float(results["test_f1"]) > 0.6, results
  # The default size: hidden_size units per direction.
  assert checkpoints.bilstm_units(str(output_dir)) == 16
  texts = [" ".join(w.capitalize() for w in words) for words, _ in test_sentences]
  # The server of the run, through a Predictor, tags the test sentences as --do_predict did
  # (windows too).
  served = predictor.load(str(output_dir), task="ner")(texts)
  assert [tag for sentence in served for _, tag in sentence] == _tags(
      output_dir / "test_predictions.txt")


def test_run_squad_with_bilstm_serves_its_predictions(tmp_path):
  with open(shared_data("squad", "dev-v2.0.subset.json")) as f:
    dataset = json.load(f)
  # One paragraph's questions (some with an answer, some without) in a few windows of its long
  # context: what --do_predict and the server must agree on.
  dataset["data"] = [dict(dataset["data"][0], paragraphs=dataset["data"][0]["paragraphs"][:1])]
  predict_file = tmp_path / "squad.json"
  predict_file.write_text(json.dumps(dataset))
  vocab_size = small_vocab(dataset, tmp_path / "vocab.txt")
  BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=37, max_position_embeddings=128).to_json_file(
                 str(tmp_path / "bert_config.json"))
  output_dir = tmp_path / "out"
  # Its 15 windows in one batch: a batch of another shape would trace the BiLSTM once more.
  result = run_script(
      "run_squad.py", f"--vocab_file={tmp_path / 'vocab.txt'}",
      f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--predict_file={predict_file}",
      f"--train_file={predict_file}", f"--output_dir={output_dir}", "--max_seq_length=96",
      "--doc_stride=32", "--max_query_length=24", "--version_2_with_negative", "--n_best_size=5",
      "--do_train", "--do_predict", "--train_batch_size=4", "--predict_batch_size=16",
      "--num_train_epochs=1", "--learning_rate=1e-3", "--bilstm_head", "--bilstm_hidden_size=12")
  _check_ok(result)
  assert checkpoints.bilstm_units(str(output_dir)) == 12
  questions = [(qa["id"], qa["question"], p["context"]) for article in dataset["data"]
               for p in article["paragraphs"] for qa in p["qas"]]
  # The run's server (export.build_server, as --export_dir would save it) gives the null odds
  # --do_predict wrote.
  served = predictor.load(str(output_dir), task="squad")(
      question=[q for _, q, _ in questions], context=[c for _, _, c in questions])
  null_odds = json.loads((output_dir / "null_odds.json").read_text())
  np.testing.assert_allclose([row["null_score_diff"] for row in served],
                             [null_odds[qid] for qid, _, _ in questions], atol=1e-4)

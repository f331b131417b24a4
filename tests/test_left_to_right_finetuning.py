"""Fine-tuning with --left_to_right (the paper's Table 5 "LTR & No NSP" row keeps the left-only
constraint at fine-tuning): token outputs that never see their right, a classifier that pools the
last real token, and run_classifier end to end (the run's server serves its own predictions; a
run resumed without the flag is refused)."""
import numpy as np
import tensorflow as tf

from bert_tf.model import checkpoints
from bert_tf.model import heads
from bert_tf.serving import predictor
from support.script_runner import run_script
from support.models import HEADS_CONFIG as CONFIG
from support.models import random_inputs
from support.task_data import synthetic_sst2
from support.tiny import WORDS, common_args, read_results, write_config, write_vocab


def _changed_at(inputs, row, position, new_id=9):
  ids = tf.tensor_scatter_nd_update(inputs["input_ids"], [[row, position]], [new_id])
  return dict(inputs, input_ids=ids)


def test_token_outputs_never_see_their_right():
  tf.random.set_seed(1)
  inputs = random_inputs([8, 8], 8)
  other = _changed_at(inputs, 0, 5, new_id=int(inputs["input_ids"][0, 5]) % 49 + 1)
  for model in (heads.BertTokenClassifier(CONFIG, 5, causal=True),
                heads.BertSpanLabeler(CONFIG, causal=True)):
    name = "logits" if "logits" in model(inputs) else "start_logits"
    a, b = model(inputs)[name].numpy(), model(other)[name].numpy()
    np.testing.assert_allclose(a[0, :5], b[0, :5], atol=1e-6)
    assert np.abs(a[0, 5:] - b[0, 5:]).max() > 1e-6
    np.testing.assert_array_equal(a[1], b[1])
  bidirectional = heads.BertTokenClassifier(CONFIG, 5)
  assert np.abs(bidirectional(inputs)["logits"][0, :5]
                - bidirectional(other)["logits"][0, :5]).max() > 1e-6


def test_classifier_pools_the_last_real_token():
  tf.random.set_seed(2)
  model = heads.BertClassifier(CONFIG, 3, causal=True)
  lengths = [6, 3]
  inputs = random_inputs(lengths, 8)
  outputs = model.encoder(inputs)
  last = outputs["sequence_output"].numpy()[[0, 1], [5, 2]]
  np.testing.assert_allclose(outputs["pooled_output"], model.encoder.pooler(last), atol=1e-6)
  # The first token and the last real token both change the logits; padding does not.
  base = model(inputs)["logits"].numpy()
  for position in (0, 2):
    assert np.abs(model(_changed_at(inputs, 1, position))["logits"][1] - base[1]).max() > 1e-6
  np.testing.assert_array_equal(model(_changed_at(inputs, 1, 6))["logits"], base)


def test_run_classifier_left_to_right_serves_its_predictions_and_refusal(tmp_path):
  vocab = write_vocab(tmp_path)
  config = write_config(tmp_path / "bert_config.json", len(WORDS))
  synthetic_sst2(tmp_path / "data", seed=1, n=128)
  output_dir = tmp_path / "out"
  # Sentences of at most 10 tokens: 16 positions hold them all.
  args = [*common_args(tmp_path / "data", vocab, config, output_dir), "--task_name=SST-2",
          "--max_seq_length=16"]
  result = run_script("run_classifier.py", *args, "--left_to_right", "--do_train", "--do_eval",
                      "--do_predict", "--seed=1", "--train_batch_size=16", "--num_train_epochs=3",
                      "--learning_rate=2e-3")
  assert result.returncode == 0, result.stderr[-3000:]
  assert checkpoints.left_to_right(str(output_dir))
  assert read_results(output_dir)["eval_accuracy"] >= 0.8
  # The run's server, which an export saves (export.build_server with the run's options; the
  # SavedModel's save and load are test_export's and test_keep_best's), attends left to right
  # too: it serves the probabilities --do_predict wrote.
  served = predictor.load(str(output_dir), task="classifier")
  assert served.module.model.encoder.causal
  texts = [line.split("\t")[1] for line in
           (tmp_path / "data" / "test.tsv").read_text().splitlines()[1:]]
  np.testing.assert_allclose(served.serve(text_a=tf.constant(texts))["probabilities"],
                             np.loadtxt(output_dir / "test_results.tsv"), atol=1e-5)
  refused = run_script("run_classifier.py", *args, "--do_eval")
  assert refused.returncode != 0
  assert "--left_to_right: " in refused.stderr and "pass --left_to_right" in refused.stderr

"""The generic loop (bert_tf.training.loop) on a tiny pretrainer: resume, accumulation, NaN guard,
eval/predict, strategies (mirrored over 2 logical CPUs and 2 worker processes run as subprocesses,
since devices must be configured before TensorFlow starts)."""
import collections
import concurrent.futures
import json
import os
import shutil
import socket
from unittest import mock

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import records
from bert_tf.errors import BertTfError
from bert_tf.drivers import pretraining
from bert_tf.model import modeling
from bert_tf.training import loop
from bert_tf.training import runtime
from bert_tf.training.options import RuntimeOptions
from bert_tf.training.options import Schedule
from bert_tf.training.options import TrainLoopOptions
from support.paths import REPO
from support.pretraining_runs import PREDS, SEQ, VOCAB, tiny_config, write_pretraining_records
from support.script_runner import run_script


@pytest.fixture(scope="module")
def record_file(tmp_path_factory):
  return write_pretraining_records(str(tmp_path_factory.mktemp("records") / "a.tfrecord"), 64)


def run_train(output_dir, record_file, num_train_steps=8, batch_size=8, accumulation=1,
              dropout=0.1, loss_fn=None, **loop_options):
  runtime.set_seed(7)
  strategy = runtime.get_strategy("one_device")
  input_fn = pretraining.input_fn([record_file], SEQ, PREDS, batch_size, True, seed=3)
  config = tiny_config(dropout)
  loop_options = TrainLoopOptions(save_checkpoints_steps=4, log_steps=4,
                                  gradient_accumulation_steps=accumulation, **loop_options)
  return loop.train(strategy, lambda: modeling.BertPretrainer(config),
                    loss_fn or pretraining.loss_fn(), input_fn,
                    Schedule(num_train_steps, 1e-3, 2, batch_size), str(output_dir), loop_options,
                    RuntimeOptions(seed=7), metric_fn=pretraining.metric_fn())


def weights(model):
  return {v.name: v.numpy() for v in model.variables}


def test_resume_gives_the_same_weights_as_an_uninterrupted_run(tmp_path, record_file):
  straight = weights(run_train(tmp_path / "straight", record_file, num_train_steps=8))
  # As if preempted just after step 4's checkpoint: a copy of the run without step 8's resumes at
  # step 4 (dropout RNG and input position included) and must land on the same weights, bit for
  # bit.
  resumed_dir = str(tmp_path / "resumed")
  shutil.copytree(tmp_path / "straight", resumed_dir)
  for path in tf.io.gfile.glob(os.path.join(resumed_dir, "model.ckpt-8.*")):
    tf.io.gfile.remove(path)
  resumed = run_train(tmp_path / "resumed", record_file, num_train_steps=8)
  assert loop.global_step(resumed) == 8
  resumed_weights = weights(resumed)
  for name, value in straight.items():
    np.testing.assert_array_equal(resumed_weights[name], value, err_msg=name)
  assert tf.io.gfile.glob(str(tmp_path / "straight" / "train" / "events.*"))


def test_gradient_accumulation_matches_the_full_batch(tmp_path):
  path = _uniform_weight_records(tmp_path)
  full_model = run_train(tmp_path / "full", path, num_train_steps=3, dropout=0.0)
  accumulated_model = run_train(tmp_path / "acc", path, num_train_steps=3, dropout=0.0,
                                accumulation=2)
  full, accumulated = weights(full_model), weights(accumulated_model)
  for name, value in full.items():
    np.testing.assert_allclose(accumulated[name], value, atol=1e-5, err_msg=name)
  # The training metrics are logged with accumulation too, over every micro-batch: the same
  # figures as the full batch's (equal weights per micro-batch).
  assert sorted(accumulated_model.train_summary) == sorted(full_model.train_summary)
  for name, value in full_model.train_summary.items():
    if name not in ("steps_per_second", "examples_per_second"):
      assert accumulated_model.train_summary[name] == pytest.approx(value, rel=1e-4), name


def test_adam_bias_correction_changes_the_steps(tmp_path, record_file):
  # Step 0 has learning rate 0 (warmup), step 1 is the first to move the weights.
  plain = weights(run_train(tmp_path / "plain", record_file, num_train_steps=2))
  corrected = weights(run_train(tmp_path / "corrected", record_file, num_train_steps=2,
                                adam_bias_correction=True))
  kernel = [name for name in plain if name.endswith("pooler/dense/kernel:0")][0]
  assert np.abs(corrected[kernel] - plain[kernel]).max() > 1e-5


@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory, record_file):
  output_dir = tmp_path_factory.mktemp("trained")
  run_train(output_dir, record_file, num_train_steps=4)
  return output_dir


def test_nan_loss_stops_without_overwriting_the_last_checkpoint(tmp_path, trained_dir,
                                                                record_file):
  tmp_path = tmp_path / "nan"
  shutil.copytree(trained_dir, tmp_path)
  before = tf.train.load_checkpoint(str(tmp_path / "model.ckpt-4")).get_tensor(
      "model/encoder/pooler/kernel/.ATTRIBUTES/VARIABLE_VALUE")

  def nan_loss(features, outputs):
    return pretraining.loss_fn()(features, outputs) * float("nan")

  with pytest.raises(BertTfError, match="NaN.*model.ckpt-4"):
    run_train(tmp_path, record_file, num_train_steps=8, loss_fn=nan_loss)
  assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-4")
  after = tf.train.load_checkpoint(str(tmp_path / "model.ckpt-4")).get_tensor(
      "model/encoder/pooler/kernel/.ATTRIBUTES/VARIABLE_VALUE")
  np.testing.assert_array_equal(before, after)


def test_evaluate_predict_and_restore(tmp_path, trained_dir, record_file):
  strategy = runtime.get_strategy("one_device")
  eval_fn = pretraining.input_fn([record_file], SEQ, PREDS, 8, False)
  model, step = loop.restore_model(strategy, lambda: modeling.BertPretrainer(tiny_config()),
                                       eval_fn, output_dir=str(trained_dir))
  assert step == 4
  results = loop.evaluate(strategy, model, eval_fn, pretraining.metric_fn(),
                              pretraining.loss_fn(), steps=3, global_step=step)
  assert set(results) == {"masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                          "next_sentence_loss", "loss", "global_step"}
  # The eval loss is the weighted MLM loss plus the NSP loss, batch by batch.
  assert results["loss"] == pytest.approx(
      results["masked_lm_loss"] + results["next_sentence_loss"], rel=0.05)
  path = str(tmp_path / "eval_results.txt")
  loop.write_eval_results(path, results)
  lines = open(path).read().splitlines()
  assert lines[0].startswith("global_step = 4") and lines[1].startswith("loss = ")
  finite_fn = records.records_input_fn([record_file], records.pretraining_features(SEQ, PREDS),
                                        24, is_training=False)
  batches = list(loop.predict(strategy, model, finite_fn))
  assert [len(b["input_ids"]) for b in batches] == [24, 24, 16]
  assert batches[0]["mlm_logits"].shape == (24, PREDS, VOCAB)
  # Evaluation during training predicts again and again: one trace serves the full batches, the
  # last smaller one and every later call that keeps the step.
  cache = {}
  for _ in range(2):
    again = list(loop.predict(strategy, model, finite_fn, step_cache=cache))
    np.testing.assert_allclose(again[-1]["mlm_logits"], batches[-1]["mlm_logits"], atol=1e-5)
  (_, step_fn), = cache.values()
  assert step_fn.experimental_get_tracing_count() == 1


def test_float16_loss_scaling_trains(tmp_path, record_file):
  runtime.set_precision("float16")
  try:
    model = run_train(tmp_path, record_file, num_train_steps=2)
  finally:
    runtime.set_precision("float32")
  assert all(np.isfinite(v).all() for v in weights(model).values())


def test_bad_flags():
  with pytest.raises(BertTfError, match="--distribution_strategy"):
    runtime.get_strategy("horovod")
  with pytest.raises(BertTfError, match="--dtype"):
    runtime.set_precision("int8")
  with pytest.raises(BertTfError, match="--train_batch_size"):
    records.per_replica_batch_size(tf.distribute.InputContext(1, 0, 2), 7)


def test_tpu_strategy_is_built_from_tpu_name():
  with mock.patch.object(tf.distribute.cluster_resolver, "TPUClusterResolver") as resolver, \
      mock.patch.object(tf.config, "experimental_connect_to_cluster") as connect, \
      mock.patch.object(tf.tpu.experimental, "initialize_tpu_system") as initialize, \
      mock.patch.object(tf.distribute, "TPUStrategy") as tpu_strategy:
    strategy = runtime.get_strategy("tpu", tpu_name="my-tpu", tpu_zone="us-central1-b",
                                     gcp_project="proj")
  resolver.assert_called_once_with(tpu="my-tpu", zone="us-central1-b", project="proj")
  connect.assert_called_once_with(resolver.return_value)
  initialize.assert_called_once_with(resolver.return_value)
  assert strategy is tpu_strategy.return_value


# A worker script for the strategy tests: trains the tiny pretrainer, prints the loss curve. Run
# by run_script's pre-imported server (TensorFlow's import is not paid per worker); TF_CONFIG comes
# as an argument, since the server runs a changed TF_* environment as a fresh interpreter.
_WORKER = r"""
import os, sys, json
import tensorflow as tf
strategy_name, record_file, output_dir, tf_config = sys.argv[1:5]
if tf_config:
  os.environ["TF_CONFIG"] = tf_config
if strategy_name == "mirrored":
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, {tests!r})
from absl import logging
logging.set_verbosity("info")
from bert_tf.drivers import pretraining
from bert_tf.model import modeling
from bert_tf.training import loop
from bert_tf.training import runtime
from bert_tf.training.options import RuntimeOptions, Schedule, TrainLoopOptions
from support import pretraining_runs as t
strategy = runtime.get_strategy(strategy_name, num_gpus=0)
runtime.set_seed(7)
losses = []
real_loss = pretraining.loss_fn()
def loss_fn(features, outputs):
  return real_loss(features, outputs)
input_fn = pretraining.input_fn([record_file], t.SEQ, t.PREDS, 8, True, seed=3)
model = loop.train(strategy, lambda: modeling.BertPretrainer(t.tiny_config(0.0)), loss_fn,
                   input_fn, Schedule(6, 1e-3, 2), output_dir,
                   TrainLoopOptions(log_steps=1, save_checkpoints_steps=3), RuntimeOptions(seed=7))
print("REPLICAS", strategy.num_replicas_in_sync)
print("WEIGHTS", json.dumps(float(sum(abs(v.numpy()).sum() for v in model.trainable_variables))))
sys.stdout.flush()
os._exit(0)  # no interpreter teardown, where tf.data's autotune threads can hold it up
"""


def _run_workers(tmp_path, record_file, *runs, timeout=300):
  """Runs the worker once per (strategy name, output_dir, TF_CONFIG or ""), all at once (the
  workers of a cluster wait for one another); returns each run's log (stdout, then stderr)."""
  script = tmp_path / "worker.py"
  script.write_text(_WORKER.replace("{tests!r}", repr(os.path.join(REPO, "tests"))))

  def run(args):
    result = run_script(str(script), args[0], record_file, *args[1:], timeout=timeout)
    return result.returncode, result.stdout + result.stderr

  with concurrent.futures.ThreadPoolExecutor(len(runs)) as pool:
    return list(pool.map(run, runs))


def _losses(log):
  return [float(line.split(" loss ")[1].split(",")[0]) for line in log.splitlines()
          if "loss " in line and "step " in line and "/6 " in line]


def _uniform_weight_records(tmp_path):
  """Every example with all its predictions real, so per-replica and global MLM means agree."""
  path = str(tmp_path / "full.tfrecord")
  rng = np.random.RandomState(1)
  with tf.io.TFRecordWriter(path) as writer:
    for _ in range(64):
      ids = rng.randint(5, VOCAB, SEQ).tolist()
      positions = sorted(rng.choice(np.arange(1, SEQ), PREDS, replace=False).tolist())
      writer.write(records.serialize(collections.OrderedDict(
          input_ids=ids, input_mask=[1] * SEQ, segment_ids=[0] * SEQ,
          masked_lm_positions=positions, masked_lm_ids=[ids[p] for p in positions],
          masked_lm_weights=[1.0] * PREDS, next_sentence_labels=[int(rng.randint(2))])))
  return path


def test_mirrored_over_two_cpus_matches_one_device(tmp_path):
  path = _uniform_weight_records(tmp_path)
  (one, one_log), (two, two_log) = _run_workers(
      tmp_path, path, ("one_device", str(tmp_path / "one"), ""),
      ("mirrored", str(tmp_path / "two"), ""))
  assert one == 0, one_log[-3000:]
  assert two == 0, two_log[-3000:]
  assert "REPLICAS 1" in one_log and "REPLICAS 2" in two_log
  # The same global batch: each replica reads half of it (records sharded across pipelines, in
  # the same shuffled order), so the loss curves agree to float tolerance.
  one_losses, two_losses = _losses(one_log), _losses(two_log)
  assert len(one_losses) == 6, one_log[-3000:]
  np.testing.assert_allclose(two_losses, one_losses, rtol=1e-4)


def test_multi_worker_mirrored_trains_and_checkpoints(tmp_path, record_file):
  ports = []
  for _ in range(2):
    with socket.socket() as s:
      s.bind(("127.0.0.1", 0))
      ports.append(s.getsockname()[1])
  workers = [f"127.0.0.1:{p}" for p in ports]
  runs = [("multi_worker_mirrored", str(tmp_path / "mw"), json.dumps(
      {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
          for index in range(2)]
  results = _run_workers(tmp_path, record_file, *runs)
  logs = [log for _, log in results]
  for returncode, log in results:
    assert returncode == 0, log[-3000:]
    assert "REPLICAS 2" in log
  # Both workers hold the same weights; only the chief's checkpoints remain.
  assert logs[0].split("WEIGHTS")[1].split()[0] == logs[1].split("WEIGHTS")[1].split()[0]
  assert tf.train.latest_checkpoint(str(tmp_path / "mw")).endswith("model.ckpt-6")
  assert not tf.io.gfile.glob(str(tmp_path / "mw" / ".worker_*"))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pretraining_cross_entropy_and_its_gradient_match_log_softmax_one_hot(dtype):
  logits = tf.cast(tf.random.stateless_normal([3, 5, VOCAB], seed=[1, 2]) * 4, dtype)
  labels = tf.random.stateless_uniform([3, 5], seed=[3, 4], maxval=VOCAB, dtype=tf.int32)
  weights = tf.random.stateless_uniform([3, 5], seed=[5, 6])

  def reference(x):  # the original's formula
    log_probs = tf.nn.log_softmax(tf.cast(x, tf.float32), axis=-1)
    return -tf.reduce_sum(log_probs * tf.one_hot(labels, VOCAB), axis=-1)

  results = []
  for fn in (reference, lambda x: pretraining._cross_entropy(x, labels)):  # pylint: disable=protected-access
    with tf.GradientTape() as tape:
      tape.watch(logits)
      loss = tf.reduce_sum(fn(logits) * weights)
    gradient = tape.gradient(loss, logits)
    assert gradient.dtype == logits.dtype
    results.append((loss.numpy(), tf.cast(gradient, tf.float32).numpy()))
  np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-6)
  np.testing.assert_allclose(results[1][1], results[0][1], atol=1e-6)

"""bert_tf.options: the typed options, each rule once, beside its option; their builders."""
import dataclasses
import os
import types

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pytest

from bert_tf import flags as bert_flags
from bert_tf import options
from bert_tf.errors import BertTfError


def test_defaults_are_the_flags_defaults():
  bert_flags.define_runtime_flags()
  values = types.SimpleNamespace(**{name: bert_flags.FLAGS[name].default
                                    for name in bert_flags.FLAGS})
  runtime = bert_flags.runtime_options(values)
  assert runtime == dataclasses.replace(options.RuntimeOptions(), seed=12345)
  assert bert_flags.train_loop_options(values) == options.TrainLoopOptions()
  assert runtime.strategy_name == "one_device" and runtime.trim_padding


def test_a_script_without_a_flag_keeps_the_default():
  runtime = bert_flags.runtime_options(types.SimpleNamespace(dtype="bfloat16"))
  assert runtime.dtype == "bfloat16" and runtime.seed is None


def test_tpu_and_xla():
  runtime = options.RuntimeOptions(use_tpu=True)
  assert runtime.strategy_name == "tpu" and not runtime.trim_padding
  assert not options.RuntimeOptions(use_xla=True).trim_padding
  with pytest.raises(dataclasses.FrozenInstanceError):
    runtime.dtype = "float16"


@pytest.mark.parametrize("make, message", [
    (lambda: options.RuntimeOptions(num_gpus=-1), "--num_gpus: expected a number of at least 0, got "
     "-1"),
    (lambda: options.RuntimeOptions(num_tpu_cores=0), "--num_tpu_cores: expected an integer"),
    (lambda: options.RuntimeOptions(dtype="float64"), "--dtype: expected one of"),
    (lambda: options.RuntimeOptions(distribution_strategy="x"), "--distribution_strategy: "),
    (lambda: options.TrainLoopOptions(log_steps=0), "--log_steps: expected an integer of at "
     "least 1, got 0"),
    (lambda: options.TrainLoopOptions(gradient_accumulation_steps=0),
     "--gradient_accumulation_steps: expected an integer of at least 1"),
    (lambda: options.TrainLoopOptions(keep_checkpoint_max=-1),
     "--keep_checkpoint_max: expected a number of at least 0, got -1"),
    (lambda: options.TrainLoopOptions(optimizer="sgd"), "--optimizer: expected one of adamw"),
    (lambda: options.check_max_seq_length(2), r"--max_seq_length: expected an integer of at "
     r"least 3 \(\[CLS\] x \[SEP\]\), got 2"),
    (lambda: options.check_max_seq_length(70000, 5, 65535, "why"),
     r"--max_seq_length: expected an integer in \[5, 65535\] \(why\), got 70000"),
])
def test_each_rule_names_its_flag(make, message):
  with pytest.raises(BertTfError, match=message):
    make()


def test_values_checks_the_typed_options(monkeypatch):
  bert_flags.define_runtime_flags()
  bert_flags.define_max_seq_length_flag()
  bert_flags.FLAGS.mark_as_parsed()
  monkeypatch.setattr(bert_flags.FLAGS, "log_steps", 0)
  with pytest.raises(BertTfError, match="--log_steps: expected an integer of at least 1, got 0"):
    bert_flags.values()
  bert_flags.FLAGS.log_steps = 100
  monkeypatch.setattr(bert_flags.FLAGS, "max_seq_length", 2)
  with pytest.raises(BertTfError, match="--max_seq_length: expected an integer of at least 3"):
    bert_flags.values()
  bert_flags.values(check_ranges=False)

"""The typed options (bert_tf.training.options, bert_tf.drivers' FinetuneOptions and PretrainingOptions):
each rule once, beside its option; their builders (bert_tf.cli.flags)."""
import dataclasses
import glob
import importlib
import os
import pkgutil
import re
import types

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import pytest

from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.data.pretraining_data.pipeline import DataOptions
from bert_tf.drivers import finetune_options
from bert_tf.drivers.pretraining_options import PretrainingOptions
from bert_tf.model import objectives
from bert_tf import options as bert_options
from bert_tf.training import options
from support.paths import REPO


def test_defaults_are_the_flags_defaults():
  bert_flags.define_flags(options.RuntimeOptions)
  bert_flags.define_flags(options.TrainLoopOptions)
  values = types.SimpleNamespace(**{name: bert_flags.FLAGS[name].default
                                    for name in bert_flags.FLAGS})
  runtime = bert_flags.build(options.RuntimeOptions, values)
  assert runtime == options.RuntimeOptions() and runtime.seed == 12345
  assert bert_flags.build(options.TrainLoopOptions, values) == options.TrainLoopOptions()
  assert runtime.strategy_name == "one_device" and runtime.trim_padding


def test_a_script_without_a_flag_keeps_the_default():
  runtime = bert_flags.build(options.RuntimeOptions, types.SimpleNamespace(dtype="bfloat16"))
  assert runtime == options.RuntimeOptions(dtype="bfloat16")


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
])
def test_each_rule_names_its_flag(make, message):
  with pytest.raises(BertTfError, match=message):
    make()


def test_values_leaves_the_rules_to_the_options(monkeypatch):
  bert_flags.define_flags(options.TrainLoopOptions)
  bert_flags.FLAGS.mark_as_parsed()
  monkeypatch.setattr(bert_flags.FLAGS, "log_steps", 0)
  values = bert_flags.values()
  with pytest.raises(BertTfError, match="--log_steps: expected an integer of at least 1, got 0"):
    bert_flags.build(options.TrainLoopOptions, values)


def _finetune_options(**overrides):
  return finetune_options.FinetuneOptions(**dict(
      dict(output_dir="out", bert_config_file="c.json", vocab_file="v.txt", do_train=True),
      **overrides))


@pytest.mark.parametrize("flag, value, expected", [
    ("train_batch_size", 0, "an integer of at least 1"),
    ("eval_batch_size", 0, "an integer of at least 1"),
    ("predict_batch_size", 0, "an integer of at least 1"),
    ("eval_every_n_steps", 0, "an integer of at least 1"),
    ("early_stopping_patience", 0, "an integer of at least 1"),
    ("bilstm_hidden_size", 0, "an integer of at least 1"),
    ("learning_rate", -2e-05, "a number above 0"),
    ("num_train_epochs", 0.0, "a number above 0"),
    ("warmup_proportion", 1.5, "a fraction between 0 and 1"),
])
def test_finetune_ranges(flag, value, expected):
  with pytest.raises(BertTfError, match=re.escape(f"--{flag}: expected {expected}, got {value}")):
    _finetune_options(**{flag: value})
  assert _finetune_options(**{flag: None if flag in _NONE_ALLOWED else 1}).do_train


# The fine-tuning flags whose default None means "not given".
_NONE_ALLOWED = ("eval_every_n_steps", "early_stopping_patience", "bilstm_hidden_size")


def _pretraining_values(**overrides):
  values = dict(input_file="in", bert_config_file="c.json", output_dir="out", init_checkpoint=None,
                vocab_file=None, max_seq_length=128, max_predictions_per_seq=20, do_train=True,
                do_eval=False, train_batch_size=32, eval_batch_size=8, learning_rate=5e-5,
                num_train_steps=10, num_warmup_steps=0, max_eval_steps=5,
                export_tf1_checkpoint=False, pack_sequences=False, max_instances_per_row=None,
                max_predictions_per_row=None, no_nsp=False, left_to_right=False,
                dynamic_masking=False, masked_lm_prob=0.15, do_whole_word_mask=False,
                mask_prob_mask=0.8, mask_prob_keep=0.1, mask_prob_random=0.1)
  values.update(overrides)
  return types.SimpleNamespace(**values)


def test_pretraining_options_carry_the_objective():
  built = bert_flags.build(PretrainingOptions, _pretraining_values())
  assert built.objective == objectives.Objective() and built.max_predictions_per_seq == 20
  assert built.objective.predicts_next_sentence
  for flags in (dict(no_nsp=True), dict(left_to_right=True)):
    objective = bert_flags.build(PretrainingOptions, _pretraining_values(**flags)).objective
    assert not objective.predicts_next_sentence and objective.metric_names() == [
        "masked_lm_accuracy", "masked_lm_loss"]
  assert bert_flags.build(PretrainingOptions, _pretraining_values(
      dynamic_masking=True, vocab_file="v.txt")).objective.run_shape() == {
          "left_to_right": False, "dynamic_masking": True}


@pytest.mark.parametrize("overrides, message", [
    (dict(do_train=False), "--do_train/--do_eval: at least one of them must be True"),
    (dict(num_train_steps=0), "--num_train_steps: expected an integer of at least 1, got 0"),
    (dict(num_warmup_steps=-1), "--num_warmup_steps: expected a number of at least 0, got -1"),
    (dict(max_eval_steps=0), "--max_eval_steps: expected an integer of at least 1, got 0"),
    (dict(eval_batch_size=0), "--eval_batch_size: expected an integer of at least 1, got 0"),
    (dict(learning_rate=0.0), "--learning_rate: expected a number above 0, got 0.0"),
    (dict(max_predictions_per_seq=0), "--max_predictions_per_seq: expected an integer of at least"),
    (dict(dynamic_masking=True), "--dynamic_masking: needs --vocab_file"),
    (dict(dynamic_masking=True, vocab_file="v", left_to_right=True), "--left_to_right"),
])
def test_pretraining_rules(overrides, message):
  with pytest.raises(BertTfError, match=re.escape(message)):
    bert_flags.build(PretrainingOptions, _pretraining_values(**overrides))


def _data_values(**overrides):
  values = dict(
      input_file="a.txt", output_file="o.tfrecord", vocab_file="v.txt", do_lower_case=True,
      num_workers=2, num_shards=1, shard_index=None, beam_runner=None, beam_pipeline_options="",
      progress_seconds=30, max_seq_length=64, max_predictions_per_seq=10, random_seed=1,
      dupe_factor=1, masked_lm_prob=0.15, short_seq_prob=0.1, do_whole_word_mask=False,
      mask_prob_mask=0.8, mask_prob_keep=0.1, mask_prob_random=0.1, no_nsp=False, unmasked=False)
  values.update(overrides)
  return types.SimpleNamespace(**values)


def test_create_pretraining_data_options():
  built = bert_flags.build(DataOptions, _data_values())
  assert built.num_workers == 2 and built.instances.max_seq_length == 64
  assert built.instances.max_predictions_per_seq == 10
  with pytest.raises(BertTfError, match=re.escape(
      "--max_seq_length: cannot use sequence length 65536 because instances hold their positions "
      "in 16 bits (up to 65535)")):
    bert_flags.build(DataOptions, _data_values(max_seq_length=65536))


@pytest.mark.parametrize("flags, message", [
    (dict(max_predictions_per_seq=0), "--max_predictions_per_seq: expected an integer of at least "
     "1, got 0"),
    (dict(masked_lm_prob=1.5), "--masked_lm_prob: expected a fraction between 0 and 1, got 1.5"),
    (dict(mask_prob_mask=0.5), "--mask_prob_mask/--mask_prob_keep/--mask_prob_random: expected "
     "fractions between 0 and 1 that sum to 1, got 0.5 + 0.1 + 0.1 = 0.7"),
    (dict(mask_prob_mask=1.2, mask_prob_keep=-0.2, mask_prob_random=0.0), "--mask_prob_mask/"),
])
def test_masking_rules(flags, message):
  with pytest.raises(BertTfError, match=re.escape(message)):
    objectives.Masking(**flags)


def test_one_masking_type_for_both_scripts():
  # create_pretraining_data.py and run_pretraining.py --dynamic_masking read the same flags into
  # the same Masking, checked by the same rules; masked_lm_prob 0 is the original's (each instance
  # still predicts one token).
  flags = dict(max_predictions_per_seq=7, masked_lm_prob=0.0, do_whole_word_mask=True,
               mask_prob_mask=1.0, mask_prob_keep=0.0, mask_prob_random=0.0)
  data = bert_flags.build(DataOptions, _data_values(**flags)).instances.masking
  dynamic = bert_flags.build(PretrainingOptions, _pretraining_values(
      dynamic_masking=True, vocab_file="v.txt", **flags)).objective.masking
  assert data == objectives.Masking(**flags)
  assert dynamic == objectives.Masking(dynamic_masking=True, **flags)


@pytest.mark.parametrize("flags, message", [
    (dict(dupe_factor=0), "--dupe_factor: expected an integer of at least 1, got 0"),
    (dict(short_seq_prob=-0.1), "--short_seq_prob: expected a fraction between 0 and 1, got -0.1"),
])
def test_create_pretraining_data_rules(flags, message):
  with pytest.raises(BertTfError, match=re.escape(message)):
    bert_flags.build(DataOptions, _data_values(**flags))


# ------------------------------------------------------------------- each option said once

def test_a_flag_is_defined_only_from_its_field():
  """Every absl flag of the library and the scripts is made by bert_flags from an options field
  (its default, help and range written there once), but export_savedmodel.py's --task, whose
  values are the tasks the registry finds."""
  sources = glob.glob(os.path.join(REPO, "*.py")) + glob.glob(
      os.path.join(REPO, "bert_tf", "**", "*.py"), recursive=True)
  defining = {}
  for path in sources:
    with open(path, encoding="utf-8") as f:
      text = f.read()
    if "DEFINE_" in text:
      defining[os.path.relpath(path, REPO)] = re.findall(r'DEFINE_\w*\("?(\w*)', text)
  assert defining == {"bert_tf/cli/flags.py": ["field"], "export_savedmodel.py": ["task"]}


def _options_classes():
  """Every options dataclass of the library: a dataclass with a field made by option()."""
  import bert_tf  # pylint: disable=g-import-not-at-top
  found = set()
  for module_info in pkgutil.walk_packages(bert_tf.__path__, "bert_tf."):
    module = importlib.import_module(module_info.name)
    for value in vars(module).values():
      if (isinstance(value, type) and dataclasses.is_dataclass(value) and
          any(bert_options.is_flag(f) for f in dataclasses.fields(value))):
        found.add(value)
  return found


def test_each_default_is_written_once():
  """A field a subclass states again, or a script's DEFAULTS and HELP, differ from what they
  replace: a second literal of the same default is a copy that can drift."""
  classes = _options_classes()
  assert {"FinetuneOptions", "RuntimeOptions", "Masking", "SquadOptions"} <= {
      cls.__name__ for cls in classes}
  for cls in classes:
    fields = {field.name: field for field in dataclasses.fields(cls)}
    for base_class in cls.__mro__[1:]:
      if not dataclasses.is_dataclass(base_class):
        continue
      for field in dataclasses.fields(base_class):
        if field.name in vars(cls).get("__annotations__", {}):
          mine = fields[field.name]
          assert (mine.default, mine.metadata.get("help")) != (
              field.default, field.metadata.get("help")), (cls, field.name)
    flag_fields = {f.name: f for f in dataclasses.fields(cls) if bert_options.is_flag(f)}
    for name, value in getattr(cls, "DEFAULTS", {}).items():
      nested = [f for c in classes for f in dataclasses.fields(c) if f.name == name]
      assert nested and all(f.default != value for f in nested), (cls, name)
    for name in getattr(cls, "LACKS", ()):
      assert any(name in {f.name for f in dataclasses.fields(c)} for c in classes), (cls, name)
    assert all(f.default is not dataclasses.MISSING or f.default_factory is not
               dataclasses.MISSING for f in flag_fields.values()), cls

"""bert_tf.tasks.base: the registry of fine-tuning tasks, their defaults, their older names, and
the task_config.json files of old runs (without "task": their "export_kind") still read."""
import dataclasses
import json
import os
import types

import pytest

from bert_tf.cli import flags as bert_flags
from bert_tf.errors import BertTfError
from bert_tf.drivers import finetune_options
from bert_tf.drivers import exporting
from bert_tf.serving import export
from bert_tf.serving import predictor
from bert_tf.tasks import base
from bert_tf.tasks import conll
from bert_tf.tasks import glue
from bert_tf.tasks import squad
from bert_tf.tasks import swag
from bert_tf.training import options as options_lib
from bert_tf.training import run_dir
from support.paths import REPO

def test_names():
  names = base.names()
  assert names == sorted(names)
  assert (glue.GlueTask, conll.NerTask, squad.SquadTask, swag.SwagTask) == tuple(
      base.get(name) for name in ("glue", "ner", "squad", "swag"))  # the modules register them
  assert base.export_names() == [name for name in names if base.get(name).server_class]
  assert set(base.export_names(aliases=True)) == set(base.export_names()) | {
      alias for name in base.export_names() for alias in base.get(name).aliases}
  assert export.task_names() == base.export_names()


@pytest.mark.parametrize("name", base.names())
def test_registered_task(name):
  """Every task the registry finds: its script is at the top level, an export or a line that
  says it has none."""
  cls = base.get(name)
  exportable, script = bool(cls.server_class), cls.script
  assert issubclass(cls, base.Task) and cls.name == name
  assert os.path.isfile(os.path.join(REPO, script)), script
  assert cls.eval_split in cls.record_files
  assert cls.num_sequences >= 1 and isinstance(cls.packed_loss_weights, str)
  if exportable:
    assert base.for_export(name) is cls and base.for_export(cls) is cls
    assert all(base.for_export(alias) is cls for alias in cls.aliases)
  else:
    with pytest.raises(BertTfError, match=f"^--task: {script} has no export$"):
      base.for_export(name)


def test_task_defaults_and_overrides():
  assert base.Task.eval_split == "dev" and base.Task.num_sequences == 1
  assert base.Task.record_files == base.RECORD_FILES
  assert base.Task.packed_loss_weights == "example_weights"
  assert squad.SquadTask.eval_split == "test"
  assert squad.SquadTask.record_files["test"] == "eval.tf_record"
  assert swag.SwagTask.num_sequences == 4
  assert conll.NerTask.packed_loss_weights == "label_weights"


def test_unknown_names():
  with pytest.raises(BertTfError, match="^task: 'nope' is not a registered task; known: embeddings, glue, "):
    base.get("nope")
  with pytest.raises(BertTfError, match=f"^--task: 'nope' is not one of "
                     f"{', '.join(base.export_names())}$"):
    base.for_export("nope")
  with pytest.raises(ValueError, match="registered twice"):
    base.register("glue")(type("Other", (base.Task,), {}))


@pytest.mark.parametrize("inputs,expected", [
    ({"text_a"}, "glue"), ({"text_a", "text_b"}, "glue"), ({"text"}, "ner"),
    ({"question", "context"}, "squad")])
def test_signature_inputs_name_the_task(inputs, expected):
  assert base.for_signature(inputs).name == expected


# ---------------------------------------------------------------------------- task_config.json

COMMON = {"do_lower_case": True, "max_seq_length": 32}
OLD_CONFIGS = {  # as runs wrote them before task_config.json named the registered task
    "classifier": dict(COMMON, export_kind="classifier", task_name="MRPC", label_list=["0", "1"],
                       pair=True, regression=False),
    "ner": dict(COMMON, export_kind="ner", task_name=None, label_list=["O", "B-PER"],
                feature_based=False),
    "squad": dict(COMMON, export_kind="squad", task_name=None, max_query_length=8,
                  max_answer_length=5, n_best_size=3, null_score_diff_threshold=None),
}


@pytest.mark.parametrize("kind,name", [("classifier", "glue"), ("ner", "ner"),
                                       ("squad", "squad")])
def test_old_task_config_files_still_load(tmp_path, kind, name):
  config = OLD_CONFIGS[kind]
  (tmp_path / "task_config.json").write_text(json.dumps(config))
  read, task = predictor._read_task_config(str(tmp_path))  # pylint: disable=protected-access
  assert read == config and task is base.get(name)
  # What the server takes, as the run wrote it (doc_stride aside: an old SQuAD run's has none,
  # the server's default serves it).
  assert set(task.server_class.OPTIONS) - {"doc_stride"} <= set(config)
  own = task.options_class()  # export_savedmodel.py's task options, flags left out
  exporting.check_task_config(kind, own, str(tmp_path))  # the run's own kind (an alias): no error
  exporting.check_task_config(name, own, str(tmp_path))  # and its registered name
  other = "ner" if kind != "ner" else "squad"
  with pytest.raises(BertTfError, match=f"^--task: .* not {other}: pass --task={name}$"):
    exporting.check_task_config(other, base.get(other).options_class(), str(tmp_path))


@pytest.mark.parametrize("recorded,task,own,expected", [
    (OLD_CONFIGS["classifier"], glue.GlueTask, glue.GlueOptions(task_name="mrpc"), None),
    (OLD_CONFIGS["classifier"], glue.GlueTask, glue.GlueOptions(task_name="sst-2"),
     "holds a MRPC fine-tuning run \\(task_config.json\\), not sst-2 fine-tuning"),
    (dict(COMMON, export_kind=None, task_name=None), swag.SwagTask, swag.SwagOptions(), None),
    (dict(COMMON, export_kind=None, task_name=None), glue.GlueTask,
     glue.GlueOptions(task_name="mrpc"), "holds a swag fine-tuning run .*, not mrpc fine-tuning"),
])
def test_a_run_goes_on_in_an_output_dir_of_its_own_task(tmp_path, recorded, task, own, expected):
  """Resuming in an output_dir a run of an earlier version wrote (its task_config.json has no
  "task"): the same task goes on, another is refused."""
  (tmp_path / "task_config.json").write_text(json.dumps(recorded))
  run = task(_options(output_dir=str(tmp_path), max_seq_length=32, task=own), None)
  check = lambda: run_dir.RunDir(str(tmp_path)).check(  # noqa: E731
      run_dir.Run(training=False, config=None, run_shape={}, task=run))
  if expected is None:
    assert check() == "evaluate"
  else:
    with pytest.raises(BertTfError, match=f"^--output_dir: {tmp_path} {expected}"):
      check()


def test_new_task_config_names_the_task(tmp_path):
  options = finetune_options.FinetuneOptions(
      output_dir=str(tmp_path), bert_config_file="c", vocab_file="v", do_train=True,
      max_seq_length=32, task=glue.GlueOptions(task_name="sst-2"))
  config = glue.GlueTask(options, None).task_config()
  assert config == dict(COMMON, task="glue", task_name="sst-2", label_list=["0", "1"], pair=False,
                        regression=False)
  (tmp_path / "task_config.json").write_text(json.dumps(config))
  assert predictor._read_task_config(str(tmp_path))[1] is glue.GlueTask  # pylint: disable=W0212


@pytest.mark.parametrize("config,expected", [
    (dict(COMMON, task="swag"), "a swag run; a predictor serves fine-tuned embeddings, glue, "
     "ner, squad models only"),
    (dict(COMMON, export_kind=None), "a swag run; a predictor serves"),  # an old run_swag.py's
    (dict(COMMON, task_name="x"), "a x run; a predictor serves"),
    (dict(COMMON, export_kind="tagger"), "a tagger run; a predictor serves"),
    (dict(OLD_CONFIGS["ner"], feature_based=True), "a feature-based NER run; a predictor"),
])
def test_task_configs_a_predictor_cannot_serve(tmp_path, config, expected):
  (tmp_path / "task_config.json").write_text(json.dumps(config))
  with pytest.raises(BertTfError, match=expected):
    predictor._read_task_config(str(tmp_path))  # pylint: disable=protected-access


# ---------------------------------------------------------------------------- typed options


def _options(**overrides):
  fields = dict(output_dir="out", bert_config_file="c", vocab_file="v", do_train=True)
  fields.update(overrides)
  return finetune_options.FinetuneOptions(**fields)


@pytest.mark.parametrize("overrides,expected", [
    (dict(do_train=False, task=squad.SquadOptions()),
     "^--do_train/--do_predict: at least one must be True$"),
    (dict(do_train=False, do_eval=False, do_predict=False),
     "^--do_train/--do_eval/--do_predict: at least one must be True$"),
    (dict(bilstm_hidden_size=8), "^--bilstm_hidden_size: only with --bilstm_head$"),
    (dict(max_instances_per_row=4), "^--max_instances_per_row: only with --pack_sequences$"),
    (dict(pack_sequences=True, bilstm_head=True), "^--pack_sequences: not with --bilstm_head"),
    (dict(eval_every_n_steps=5, do_train=False, do_predict=True),
     "^--eval_every_n_steps: evaluates during training, needs --do_train$"),
])
def test_finetune_options_rules(overrides, expected):
  with pytest.raises(BertTfError, match=expected):
    _options(**overrides)


@pytest.mark.parametrize("cls,fields,expected", [
    (squad.SquadOptions, dict(tune_null_threshold=True),
     "^--tune_null_threshold: needs --version_2_with_negative$"),
    (squad.SquadOptions, dict(doc_stride=0), "^--doc_stride: expected an integer of at least 1, "
     "got 0$"),
    (squad.SquadOptions, dict(n_best_size=-1), "^--n_best_size: expected an integer of at least "
     "0, got -1$"),
    (conll.NerOptions, dict(feature_based=True, feature_layers="top"), "^--feature_layers: 'top'"),
    (glue.GlueOptions, dict(task_name="nope"), "^--task_name: unknown task 'nope'"),
])
def test_task_options_rules(cls, fields, expected):
  with pytest.raises(BertTfError, match=expected):
    cls(**fields)


def test_options_from_flag_values():
  """The door: the fields a script has flags for; the rest keep their defaults, and the task's
  options say which shared flags the script lacks; the runtime and loop flags become their own
  options."""
  values = types.SimpleNamespace(output_dir="o", bert_config_file="c", vocab_file="v",
                                 do_train=True, do_predict=False, data_dir="d", seed=3,
                                 max_seq_length=64, unrelated=1)
  options = bert_flags.finetune_options(swag.SwagTask, values)
  assert options.task == swag.SwagOptions(data_dir="d")
  assert options.runtime == options_lib.RuntimeOptions(seed=3)
  assert options.loop == options_lib.TrainLoopOptions()
  assert (options.do_eval, options.bilstm_head, options.max_seq_length) == (False, False, 64)
  assert not options.has_flag("bilstm_head") and options.has_flag("do_eval")
  assert options.distill is None and "bilstm_head" not in options.run_shape()
  assert options.phases() == ["do_train", "do_eval", "do_predict"]
  assert options.run_shape() == {"max_seq_length": 64, "pack_sequences": False,
                                 "left_to_right": False}
  with pytest.raises(dataclasses.FrozenInstanceError):
    options.do_train = False  # pylint: disable=assigning-non-slot

"""The fine-tuning task type: one object from records to serving, and the registry of tasks by name.

A task (in the spirit of Model Garden's base_task.Task and task_factory.register_task_cls) is a
Task subclass in a module of this package, registered under its name, which is also its name
everywhere else: task_config.json's "task", export_savedmodel.py's --task, predictor.load's task=,
an export's info():

  @base.register("glue")
  class GlueTask(base.Task):
    options_class = GlueOptions        # a frozen dataclass of its flags (fields made with flag())
    server_class = ClassifierServer    # its serving half (a text_server.TextServer), or None

bert_tf.drivers.finetuning builds it as task_class(options, tokenizer) (options: a
bert_tf.drivers.finetune_options.FinetuneOptions whose `task` is an instance of options_class) and
asks it for everything about a run: its records (schema, write_train_records,
write_split_records), its model (model_fn: build_head on the shared encoder), its loss and
metrics (loss_fn, train_metric_fn, eval_metric_names, primary_metric), its result files
(finish_split) and its task_config.json (task_config). bert_tf.serving.export and
bert_tf.serving.predictor ask the class for its serving half: the server's options at export
(serving_options), its model (build_head, num_labels) and its server (server_class, which also
says how a predictor calls it). The defaults below are the common case.

The options class owns the task's flags: each field made with flag() carries its help text (and
where the flag is defined: the run script, export_savedmodel.py or both); bert_tf.cli.flags
defines the absl flags from it, and the dataclass's __post_init__ holds the rules on their
values. get(name) and names() find every module of this package: a new task type is one module
here (and its run script), nothing else to list; a task registered elsewhere before it is used
serves as well (tests/test_new_task.py defines one in a test file).
"""
import dataclasses
import importlib
import pkgutil
from typing import Any, Callable

from bert_tf.data import packing_finetune
from bert_tf.errors import BertTfError
from bert_tf.io import progress

# Record files in output_dir, per split, unless a task names others (Task.record_files).
RECORD_FILES = {"train": "train.tf_record", "dev": "eval.tf_record", "test": "predict.tf_record"}

# The help of --data_dir on export_savedmodel.py, for the tasks whose data it names (glue, ner).
DATA_DIR_EXPORT = ("--task=glue or ner with --quantize or --dtype=bfloat16: the task's data "
                   "directory, whose dev file checks the reduced-precision model against float32 "
                   "and whose training file calibrates int8.")

_REGISTRY = {}
_discovered = False


def register(name):
  """Class decorator: registers a Task subclass under `name`."""

  def decorate(cls):
    if _REGISTRY.get(name, cls) is not cls:
      raise ValueError(f"task {name!r} is registered twice: {_REGISTRY[name]} and {cls}")
    cls.name = name
    _REGISTRY[name] = cls
    return cls

  return decorate


def _discover():
  """Imports every module of bert_tf.tasks once, so that each registers its tasks."""
  global _discovered
  if _discovered:
    return
  from bert_tf import tasks  # pylint: disable=g-import-not-at-top
  for module in pkgutil.iter_modules(tasks.__path__):
    importlib.import_module(f"bert_tf.tasks.{module.name}")
  _discovered = True


def names():
  """The registered task names, sorted."""
  _discover()
  return sorted(_REGISTRY)


def get(name):
  """The Task class registered as `name`; a BertTfError listing the names otherwise."""
  _discover()
  if name not in _REGISTRY:
    raise BertTfError(f"task: {name!r} is not a registered task; known: {', '.join(names())}")
  return _REGISTRY[name]


def _named(name):
  """The Task class registered as `name` or known by it as an alias, or None."""
  _discover()
  for cls in _REGISTRY.values():
    if name == cls.name or name in cls.aliases:
      return cls
  return None


def export_names(aliases=False):
  """The registered tasks that have an export (export_savedmodel.py's --task values), sorted;
  with aliases, their older names too."""
  _discover()
  exportable = [cls for cls in _REGISTRY.values() if cls.server_class]
  return sorted([cls.name for cls in exportable] +
                [alias for cls in exportable if aliases for alias in cls.aliases if alias])


def for_export(task, flag="--task"):
  """The Task class of `task` (a registered name, an alias, or the class) with its serving half;
  a BertTfError naming the flag otherwise."""
  cls = task if isinstance(task, type) and issubclass(task, Task) else _named(task)
  if cls is None:
    raise BertTfError(f"{flag}: {task!r} is not one of {', '.join(export_names())}")
  if cls.server_class is None:
    raise BertTfError(f"{flag}: {cls.script or cls.name} has no export")
  return cls


def for_task_config(config):
  """The Task class a task_config.json names: its "task", or (files written before it had one)
  its "export_kind", an alias; None when it names no registered task."""
  if "task" in config:
    _discover()
    return _REGISTRY.get(config["task"]) if isinstance(config["task"], str) else None
  return _named(config["export_kind"]) if "export_kind" in config else None


def for_signature(inputs):
  """The Task class whose server's serving_default takes these input names (an export written
  before servers had info())."""
  _discover()
  for cls in _REGISTRY.values():
    if cls.server_class and cls.server_class.serves(set(inputs)):
      return cls
  raise BertTfError(f"an export whose inputs ({', '.join(sorted(inputs))}) no task serves")


class Task:
  """A fine-tuning task. Subclasses state the records, model, loss, metrics and result files of
  their run script, and their serving half; the defaults below are the common case."""

  name = None  # the registered name (register() sets it)
  aliases = ()  # older names: of its exports, --task values and task_config.json "export_kind"s
  script = None  # the run script, for messages
  options_class = None  # the frozen dataclass of the task's own flags (FinetuneOptions.task)
  distillable = False  # whether the script distils (--teacher_dir: write_transfer_records)
  server_class = None  # its server (a text_server.TextServer), or None: no serving half
  record_files = RECORD_FILES  # {split: record file name in output_dir}
  eval_split = "dev"  # the split evaluations during training score
  num_sequences = 1  # sequences per example (--pack_sequences packs an example's together)
  packed_loss_weights = packing_finetune.EXAMPLE_WEIGHTS  # what a packed loss is a mean over
  primary_metric = None  # the metric early stopping watches by default
  train_metric_fn = None  # (features, outputs) -> {name: (values, weights)} logged in training
  run_keys = ()  # the task_config.json fields a run goes on with only when they are the same

  def __init__(self, options, tokenizer):
    self.options = options  # a bert_tf.drivers.finetune_options.FinetuneOptions
    self.tokenizer = tokenizer

  @classmethod
  def check_options(cls, options):
    """The task's rules on a run's options that must hold before its model is opened (e.g. that
    no input file is one the run would write): a BertTfError naming the flag."""

  # ------------------------------------------------------------------ records
  def schema(self, is_training):
    """The record kind (a name_to_features dict of bert_tf.data.records' readers)."""
    raise NotImplementedError

  def write_train_records(self, path):
    """Reads the training data, writes its records to path; returns (examples the epochs count,
    records, what an example is, e.g. "training examples")."""
    raise NotImplementedError

  def write_split_records(self, split, path):
    """Reads a split ("dev", "test"), writes its records; returns what finish_split needs."""
    raise NotImplementedError

  def split_file(self, split):
    """(flag, path) of the file a split ("train", "dev", "test") is read from, which the run
    checks before it writes anything; None where there is no one file to check."""
    return None

  # ------------------------------------------------------------------ model, loss, metrics
  def model_fn(self, config, trim_padding=False):
    """A callable building the task model (its head on the shared encoder)."""
    num_labels = self.num_labels(self.task_config_fields())
    return lambda: self.build_head(config, num_labels, trim_padding=trim_padding,
                                   **self.options.head_options(config))

  def loss_fn(self, features, outputs):
    raise NotImplementedError

  def eval_metric_names(self):
    """The names finish_split's dev results hold."""
    raise NotImplementedError

  def finish_split(self, split, state, batches, global_step, output_dir=None):
    """Scores the model's outputs (an iterator of predict batches) and writes the split's result
    files (into output_dir, default options.output_dir)."""
    raise NotImplementedError

  def headline(self, split, results):
    """{name: value} of a split's results (what finish_split returned) that the run's closing
    summary shows."""
    return progress.headline(results, limit=4)

  # ------------------------------------------------------------------ task_config.json
  def task_config(self):
    """What the run's task_config.json says (which bert_tf.serving.predictor.load reads): the
    registered task, what the server needs of the run's FinetuneOptions, and the task's own
    fields (task_config_fields)."""
    config = {"task": self.name, "task_name": None,
              "do_lower_case": bool(self.options.do_lower_case),
              "max_seq_length": int(self.options.max_seq_length)}
    config.update(self.task_config_fields())
    return config

  @staticmethod
  def recorded(task_config):
    """A task_config.json's contents with its task named: files written before "task" existed
    name it by an alias in "export_kind"."""
    found = None if "task" in task_config else for_task_config(task_config)
    return dict(task_config, task=found.name) if found is not None else task_config

  def task_config_fields(self):
    """The task's own fields of task_config.json: by default its server's options."""
    return self.serving_options(self.options.task) if self.server_class else {}

  # ------------------------------------------------------------------ model and serving
  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None, causal=False):
    """The task model (its head on the shared encoder) with num_labels outputs."""
    raise NotImplementedError

  @classmethod
  def num_labels(cls, options):
    """The head's number of outputs for the server's options: one for a regression, one per
    label of a label_list, else None (the head has no choice)."""
    if options.get("regression"):
      return 1
    labels = options.get("label_list")
    return None if labels is None else len(labels)

  @classmethod
  def serving_options(cls, task_options, init_checkpoint=None):
    """The server's options (its server_class.OPTIONS) from the task's options:
    export_savedmodel.py's, or a run script's after training, with its output_dir as
    init_checkpoint."""
    return {}

  @classmethod
  def check_task_config(cls, config, task_options, path, directory):
    """export_savedmodel.py: the task_config.json at path (of the run in directory) is this
    task's; what else it says must agree with the task's options (a BertTfError naming the
    flag)."""

  @classmethod
  def unservable(cls, config):
    """What kind of run a task_config.json of this task is, where a predictor cannot serve it
    (e.g. "feature-based NER"), else None."""
    return None

  # ------------------------------------------------------------------ reduced precision
  @classmethod
  def dev_file(cls, task_options):
    """(flag, the task's dev file from its options, or None): the rows a reduced-precision
    export is checked on unless a --quantization_check_file is given."""
    return "--data_dir", None

  @classmethod
  def check_rows(cls, task_options, path):
    """The CheckSet of the rows of `path` (a file in the format of the task's dev file) on which
    bert_tf.serving.guard scores a reduced-precision path against float32; None: the task has
    no such check."""
    return None

  @classmethod
  def calibration_rows(cls, task_options):
    """(the training file, {predictor input: [value per example]}): the examples int8 is
    calibrated on; None: the task has none."""
    return None


@dataclasses.dataclass(frozen=True)
class CheckSet:
  """The held-out rows of a task a reduced-precision path is checked on, and how they are
  scored (Task.check_rows; bert_tf.serving.guard runs them)."""
  source: str  # the file the rows come from
  what: str  # what a row is, for messages ("dev examples", "sentences", "questions")
  inputs: dict  # the predictor call's keyword arguments ({name: [value per row]})
  metric: str  # the keep-best metric
  scale: float  # points per unit of the metric (100 for a fraction)
  scores: Callable[[list], dict]  # the predictor's results -> {metric name: value}
  same: Callable[[Any, Any], bool]  # whether two results of one row are the same

  @property
  def count(self):
    return len(next(iter(self.inputs.values())))


def precision_checked():
  """The registered tasks whose reduced-precision exports have an accuracy check."""
  _discover()
  return sorted(name for name, cls in _REGISTRY.items()
                if cls.check_rows.__func__ is not Task.check_rows.__func__)

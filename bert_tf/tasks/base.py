"""The fine-tuning task type: one object from records to serving, and the registry of tasks by name.

A task (in the spirit of Model Garden's base_task.Task and task_factory.register_task_cls) is a
Task subclass in a module of this package, registered under its name:

  @base.register("glue")
  class GlueTask(base.Task):
    export_task = "classifier"     # its serving half: export_savedmodel.py's --task value

bert_tf.jobs.finetuning builds it as task_class(options, tokenizer) (options: a
bert_tf.jobs.finetune_options.FinetuneOptions whose `task` is an instance of the task's own
options_class, a frozen dataclass of its flags) and asks it, through the named
members below, for everything about a run: its records (schema, write_train_records,
write_split_records, record_files), its model (model_fn, build_head: its head on the shared
encoder), its loss and metrics (loss_fn, train_metric_fn, eval_metric_names, primary_metric), its
result files (finish_split) and what goes into task_config.json (task_config_fields).
bert_tf.serving.export and bert_tf.serving.predictor ask the class for its serving half: the labels and options
it needs at export time (serving_options_from its options, from task_config.json:
serving_options_from_config), its model (build_head), its server (make_server: a tf.Module with
serve and tokenize, the building blocks are in bert_tf.tasks.servers) and how a predictor calls it
(predictor_inputs, predictor_result). A task with no serving half (export_task None, run_swag.py)
says so in one line (check_exportable).

get(name) and names() find every module of this package: a new task type is one module here (and
its run script), nothing else to list.
"""
import importlib
import json
import os
import pkgutil

from bert_tf.errors import BertTfError
from bert_tf.io import progress
from bert_tf.io.fileio import write_text_atomically
from bert_tf.model.model_dir import TASK_CONFIG_FILE

# Record files in output_dir, per split, unless a task names others (Task.record_files).
RECORD_FILES = {"train": "train.tf_record", "dev": "eval.tf_record", "test": "predict.tf_record"}
# packing_finetune.EXAMPLE_WEIGHTS: the packed row feature a packed loss is a mean over.
EXAMPLE_WEIGHTS = "example_weights"

_REGISTRY = {}
_discovered = False


def register(name):
  """Class decorator: registers a Task subclass under `name` (task_config.json's "task")."""

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


def export_names():
  """The tasks' serving names (export_savedmodel.py's --task values), sorted."""
  _discover()
  return sorted(cls.export_task for cls in _REGISTRY.values() if cls.export_task)


def for_export(name, flag="--task"):
  """The Task class that serves as `name`: a serving name ("classifier", "squad", "ner") or a
  registered task name with a serving half."""
  _discover()
  for cls in _REGISTRY.values():
    if cls.export_task and name in (cls.export_task, cls.name):
      return cls
  if name in _REGISTRY:
    _REGISTRY[name].check_exportable(flag)
  raise BertTfError(f"{flag}: {name!r} is not one of {', '.join(export_names())}")


def for_task_config(config):
  """The Task class a task_config.json names: its "task", or (files written before it had one)
  its "export_kind"; None when it names neither (a run_swag.py run)."""
  _discover()
  name = config.get("task")
  if isinstance(name, str) and name in _REGISTRY:
    return _REGISTRY[name]
  kind = config.get("export_kind")
  for cls in _REGISTRY.values():
    if kind and cls.export_task == kind:
      return cls
  return None


def for_signature(inputs):
  """The Task class whose serving_default takes these input names (an export written before
  servers had info())."""
  _discover()
  for cls in _REGISTRY.values():
    if cls.export_task and cls.serves_inputs(set(inputs)):
      return cls
  raise BertTfError(f"an export whose inputs ({', '.join(sorted(inputs))}) no task serves")


class Task:
  """A fine-tuning task. Subclasses state the records, model, loss, metrics and result files of
  their run script, and their serving half; the defaults below are the common case."""

  name = None  # the registered name (register() sets it)
  script = None  # the run script, for messages
  export_task = None  # the serving name, or None: no serving half
  record_files = RECORD_FILES  # {split: record file name in output_dir}
  eval_split = "dev"  # the split evaluations during training score
  num_sequences = 1  # sequences per example (--pack_sequences packs an example's together)
  packed_loss_weights = EXAMPLE_WEIGHTS  # the packed row feature the loss is a mean over
  primary_metric = None  # the metric early stopping watches by default
  train_metric_fn = None  # (features, outputs) -> {name: (values, weights)} logged in training
  serving_keys = ()  # the task_config.json fields the server takes as options
  options_class = None  # the frozen dataclass of the task's own flags (FinetuneOptions.task)

  def __init__(self, options, tokenizer):
    self.options = options  # a bert_tf.jobs.finetune_options.FinetuneOptions
    self.tokenizer = tokenizer

  # ------------------------------------------------------------------ records
  def schema(self, is_training):
    """The record kind (a bert_tf.data.records name_to_features dict)."""
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
    num_labels = self.num_labels(self.serving_options())
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
  def serving_options(self):
    """The server's options of this run (the task_config.json fields of serving_keys)."""
    return {}

  def task_config_fields(self):
    """What task_config.json holds for this task beyond its name and the common fields."""
    return self.serving_options()

  def task_config(self, options):
    """What an output_dir's task_config.json says: the registered task by name, its serving name
    ("export_kind", which files written before "task" existed name it by), what the server needs
    of the run's FinetuneOptions and the task's own fields (its labels, its server's options)."""
    config = {"task": self.name, "export_kind": self.export_task, "task_name": None,
              "do_lower_case": bool(options.do_lower_case),
              "max_seq_length": int(options.max_seq_length)}
    config.update(self.task_config_fields())
    return config

  def write_task_config(self, options):
    """Writes output_dir/task_config.json (atomically), which bert_tf.serving.predictor.load reads."""
    write_text_atomically(os.path.join(options.output_dir, TASK_CONFIG_FILE),
                          json.dumps(self.task_config(options), indent=2, sort_keys=True) + "\n")

  # ------------------------------------------------------------------ serving
  @classmethod
  def check_exportable(cls, flag="--export_dir"):
    """A BertTfError naming the flag when the task has no serving half."""
    if not cls.export_task:
      raise BertTfError(f"{flag}: {cls.script or cls.name} has no export")

  @classmethod
  def serving_options_from_config(cls, config):
    """The server's options from a task_config.json (the fields it has of serving_keys)."""
    return {key: config[key] for key in cls.serving_keys if key in config}

  @classmethod
  def serving_options_from(cls, task_options, init_checkpoint):
    """The server's options from the task's options (export_savedmodel.py's, or a run
    script's after training, with its output_dir as init_checkpoint)."""
    cls.check_exportable()
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

  @classmethod
  def num_labels(cls, options):
    """The head's number of outputs for the server's options (None: the head has no choice)."""
    return None

  @staticmethod
  def label_count(options):
    """How many labels the server's options list: a head with one output per label."""
    if not options.get("label_list"):
      raise BertTfError("--task_name/--label_file: the label list is needed")
    return len(options["label_list"])

  @classmethod
  def build_head(cls, config, num_labels=None, trim_padding=False, bilstm_units=None, causal=False):
    """The task model (its head on the shared encoder) with num_labels outputs."""
    raise NotImplementedError

  @classmethod
  def make_server(cls, tokenizer, model, max_seq_length, **options):
    """The tf.Module (serve, tokenize, info) bert_tf.serving.export saves."""
    cls.check_exportable()
    raise NotImplementedError

  @classmethod
  def serves_inputs(cls, inputs):
    """Whether serving_default with these input names is this task's."""
    return False

  @classmethod
  def predictor_inputs(cls, predictor, texts, text_b, question, context):
    """{input name: list of str} of a bert_tf.serving.predictor call, checked."""
    raise NotImplementedError

  @classmethod
  def predictor_result(cls, predictor, row):
    """A predictor's Python result of one input's server outputs ({name: numpy value})."""
    raise NotImplementedError


# ---------------------------------------------------------------------------- predictor inputs


def as_list(values, what):
  """A string as a list of one; a list or tuple as a list; anything else an error."""
  if isinstance(values, str):
    return [values]
  if not isinstance(values, (list, tuple)):
    raise BertTfError(f"{what}: expected a string or a list of strings, got "
                      f"{type(values).__name__}")
  if not values:
    raise BertTfError(f"{what}: an empty list; give at least one string")
  return list(values)


def strings(values, what):
  """as_list, every item a str."""
  values = as_list(values, what)
  for i, value in enumerate(values):
    if not isinstance(value, str):
      raise BertTfError(f"{what}[{i}]: expected a string, got {type(value).__name__} "
                        f"{str(value)[:40]!r}")
  return values


def text(value):
  """A server's string output as str."""
  return value.decode("utf-8", "replace")


def no_question(predictor, question, context):
  if question is not None or context is not None:
    raise BertTfError(f"{predictor.task} predictor: question=/context= are SQuAD's; call it on "
                      f"texts")

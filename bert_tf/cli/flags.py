"""The flags of every script, made from the fields of the options they set (bert_tf.options:
each field says its flag's name, type, default, help text, range and --help group once), and the
typed options built back from the parsed flags; the only module of bert_tf that reads absl's
FLAGS.

A script defines the flags of the options classes it uses at import time, marks its required
flags, and turns the parsed values into those options, which are what the library receives:

  def define_flags():
    bert_flags.define_flags(PretrainingOptions)
    bert_flags.define_flags(RuntimeOptions)
    bert_flags.define_flags(TrainLoopOptions)

  def main(_):
    values = bert_flags.values()
    pretraining.run(bert_flags.build(PretrainingOptions, values),
                    bert_flags.build(RuntimeOptions, values),
                    bert_flags.build(TrainLoopOptions, values))

An options class nests others (a field whose default is an options dataclass, or, for
FinetuneOptions, its task's options, runtime, loop and distillation: define_finetuning_flags);
the outermost class of a script says what it LACKS of the nested flags and where its DEFAULTS
and HELP differ. Each range or combination rule lives once, beside the option it constrains
(check_fields and the __post_init__ of its class), checked as a script's main builds the options,
before any work.

The names, defaults and help texts of the original's flags are the original's. Defining a flag
that is already defined is a no-op, so several scripts can be imported by one test process.
"""
import dataclasses
import sys
import types
import typing

from absl import flags

from bert_tf.drivers.finetune_options import DistillOptions
from bert_tf.drivers.finetune_options import ExportOptions
from bert_tf.drivers.finetune_options import FinetuneOptions
from bert_tf.options import DATA
from bert_tf.options import GROUPS
from bert_tf.options import is_flag
from bert_tf.training.options import RuntimeOptions
from bert_tf.training.options import TrainLoopOptions

FLAGS = flags.FLAGS
_GROUP_OF = {}  # flag name -> its --help group, as its field says
_FLAG_KINDS = {bool: "bool", int: "integer", float: "float", str: "string"}


def values():
  """The parsed flags as a plain object (attribute per flag), with `given`: the names of those
  the command line gave. The library reads nothing else; the typed options built from it check
  their own rules (a batch size of 0, a negative learning rate, ...: BertTfError naming the
  flag)."""
  return types.SimpleNamespace(**FLAGS.flag_values_dict(), given=frozenset(
      name for name in FLAGS if FLAGS[name].present))


# ------------------------------------------------------------------------------ fields -> flags


def _nested(field, nested):
  """The options class nested in `field` (nested {field name: class} first), or None."""
  if nested and field.name in nested:
    return nested[field.name]
  return type(field.default) if dataclasses.is_dataclass(field.default) else None


def _script_rules(options_class, lacks=(), defaults=None, helps=None):
  """(lacks, defaults, helps) of a script whose outermost options class is options_class."""
  return (set(lacks) | set(getattr(options_class, "LACKS", ())),
          {**getattr(options_class, "DEFAULTS", {}), **(defaults or {})},
          {**getattr(options_class, "HELP", {}), **(helps or {})})


def script_fields(options_class, export=False, nested=None, lacks=(), only=None):
  """(field, its type hint) of each flag field of options_class and of the options classes
  nested in it (those of export_savedmodel.py with export), but those it LACKS (and `lacks`);
  only: just these names."""
  lacks, _, _ = _script_rules(options_class, lacks)
  hints = typing.get_type_hints(options_class)
  for field in dataclasses.fields(options_class):
    inner = _nested(field, nested)
    if inner is not None:
      yield from script_fields(inner, export, lacks=lacks, only=only)
    elif (is_flag(field) and field.name not in lacks and
          field.metadata["export" if export else "run"] and
          (only is None or field.name in only)):
      yield field, hints[field.name]


def define_flags(options_class, export=False, nested=None, lacks=(), defaults=None, helps=None,
                 only=None, flag_values=FLAGS):
  """Defines a flag for each of script_fields(...), with the script's DEFAULTS and HELP where
  they differ from the fields'. A flag already defined is left as it is."""
  _, defaults, helps = _script_rules(options_class, lacks, defaults, helps)
  seen = set()
  for field, hint in script_fields(options_class, export, nested, lacks, only):
    if field.name in seen:  # two fields of one script would be one flag with two defaults
      raise ValueError(f"--{field.name}: a field of two options classes of one script")
    seen.add(field.name)
    _GROUP_OF[field.name] = field.metadata["group"]
    if field.name not in flag_values:
      _define(field, hint, defaults, helps, export, flag_values)


def _define(field, hint, defaults, helps, export, flag_values):
  meta = field.metadata
  help_text = helps.get(field.name) or (
      meta["export"] if export and isinstance(meta["export"], str) else meta["help"])
  default = defaults.get(field.name, field.default if field.default is not dataclasses.MISSING
                         else field.default_factory())
  if meta["choices"]:
    flags.DEFINE_enum(field.name, default, list(meta["choices"]), help_text,
                      flag_values=flag_values)
    return
  kind = meta["kind"] or _FLAG_KINDS[_without_optional(hint)]
  getattr(flags, f"DEFINE_{kind}")(field.name, list(default) if kind == "list" else default,
                                   help_text, flag_values=flag_values)


def _without_optional(hint):
  """int of Optional[int]; the hint itself otherwise."""
  args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
  return args[0] if typing.get_origin(hint) is typing.Union and len(args) == 1 else hint


# ------------------------------------------------------------------------------ flags -> options


def build(options_class, values, nested=None, lacks=(), **given):
  """An options_class from the parsed flag values of its fields (and `given`), each nested
  options class built the same way; a field whose flag the script LACKS (or lacks) keeps its
  default, and so does one whose flag the script does not define."""
  lacks, _, _ = _script_rules(options_class, lacks)
  kwargs = {}
  for field in dataclasses.fields(options_class):
    if field.name in given:
      continue
    inner = _nested(field, nested)
    if inner is not None:
      kwargs[field.name] = build(inner, values, lacks=lacks)
    elif field.name == "given" and hasattr(values, "given"):
      kwargs["given"] = values.given
    elif is_flag(field) and field.name not in lacks and hasattr(values, field.name):
      value = getattr(values, field.name)
      kwargs[field.name] = tuple(value) if isinstance(value, list) else value
  return options_class(**kwargs, **given)


def _finetuning(task_class):
  """(nested, lacks, defaults, helps) of a fine-tuning script: FinetuneOptions with its task's
  options, the runtime, the loop and (a task that distils) the distillation flags."""
  own = task_class.options_class
  nested = {"task": own, "runtime": RuntimeOptions, "loop": TrainLoopOptions}
  if task_class.distillable:
    nested["distill"] = DistillOptions
  return (nested, getattr(own, "LACKS", ()), getattr(own, "DEFAULTS", None),
          getattr(own, "HELP", None))


def define_finetuning_flags(task_class, flag_values=FLAGS):
  """Every flag of the fine-tuning script of task_class (run_classifier.py, run_squad.py, ...)."""
  nested, lacks, defaults, helps = _finetuning(task_class)
  define_flags(FinetuneOptions, nested=nested, lacks=lacks, defaults=defaults, helps=helps,
               flag_values=flag_values)


def finetune_options(task_class, values):
  """The FinetuneOptions of a fine-tuning script's flags."""
  nested, lacks, _, _ = _finetuning(task_class)
  return build(FinetuneOptions, values, nested=nested, lacks=lacks)


def define_export_flags(tasks):
  """export_savedmodel.py's flags: ExportOptions, --dtype, and each task's export flags."""
  define_flags(ExportOptions)
  define_flags(RuntimeOptions, only=("dtype",))
  for task in tasks:
    define_flags(task.options_class, export=True)


def export_options(values, task_class):
  """The ExportOptions of export_savedmodel.py's flags; task_class (the registered task that
  --task names) gives the task's own options, in `task`."""
  return build(ExportOptions, values, nested={"task": task_class.options_class},
               dtype=values.dtype)


# ------------------------------------------------------------------------------------------ help

_REQUIRED_MARK = "[required] "


def grouped_help():
  """The main module's flags as --help shows them: grouped (data and task, model, training,
  output, runtime, TPU), alphabetical within a group, required ones marked."""
  by_group = {}
  for flag in FLAGS.get_key_flags_for_module(sys.argv[0]):
    by_group.setdefault(_GROUP_OF.get(flag.name, DATA), []).append(flag)
  lines = []
  for group in GROUPS:
    if group in by_group:
      lines.append(f"\n{group} flags:")
      FLAGS._render_flag_list(by_group[group], lines)  # pylint: disable=protected-access
  lines.append("\n-v (--verbosity=1): every log line, in absl's format, TensorFlow's own "
               "included (bert_tf.io.terminal).")
  return "\n".join(lines).lstrip("\n")


def use_grouped_help():
  """Makes --help (and --helpshort) print grouped_help(): absl's own lists the flags in one
  alphabetical run, TPU flags between the hyperparameters. (absl asks FLAGS.main_module_help for
  the text; the instance attribute takes the method's place, bypassing FlagValues.__setattr__,
  which would take it for a flag.)"""
  FLAGS.__dict__["main_module_help"] = grouped_help


def mark_required(*names):
  """Marks the flags required: absl refuses to start without them, and --help says so."""
  for name in names:
    flags.mark_flag_as_required(name)
    flag = FLAGS[name]
    if not flag.help.startswith(_REQUIRED_MARK):
      flag.help = _REQUIRED_MARK + flag.help


def repeated_flags(argv):
  """(name, values) of each flag that argv gives more than once with different values; absl takes
  the last, as the original did (cli.run warns). A flag absl accepts many times (multi) is not
  counted; --name value, --name=value, --bool and --nobool are read as absl reads them."""
  given = {}
  args = iter(argv[1:])
  for arg in args:
    if arg == "--":
      break
    if not arg.startswith("-") or arg == "-":
      continue
    name, has_value, value = arg.lstrip("-").partition("=")
    if name not in FLAGS and name.startswith("no") and name[2:] in FLAGS and not has_value:
      name, has_value, value = name[2:], True, "false"
    if name not in FLAGS or name == "flagfile" or isinstance(FLAGS[name], flags.MultiFlag):
      continue
    flag = FLAGS[name]
    if not has_value:
      value = "true" if flag.boolean else next(args, "")
    try:
      parsed = flag.parser.parse(value)
    except (ValueError, TypeError):
      parsed = value
    given.setdefault(flag.name, []).append((value, repr(parsed)))
  return [(name, [value for value, _ in pairs]) for name, pairs in given.items()
          if len({parsed for _, parsed in pairs}) > 1]


# Flags that name where a run writes, in the order an interrupted run reports them.
OUTPUT_FLAGS = ("output_dir", "output_file", "export_dir", "output")


def outputs_given():
  """(--flag, value) of each output flag the script has and was given."""
  return [(f"--{name}", FLAGS[name].value) for name in OUTPUT_FLAGS
          if name in FLAGS and FLAGS[name].value]


def urls_given():
  """(--flag, path) of every path with a scheme (gs://, ...) in a string flag's value."""
  found = []
  for name in FLAGS:
    flag = FLAGS[name]
    if name == flag.name and isinstance(flag.value, str) and "://" in flag.value:
      found.extend((f"--{name}", part.strip()) for part in flag.value.split(",") if "://" in part)
  return found

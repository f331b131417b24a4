"""Options said once: each option of a script is a field of a frozen dataclass, and the field says
its flag whole: name, type, default, help text, range and --help group. bert_tf.cli.flags makes
the flags from the fields (define_flags) and the typed options from the parsed flags; the range
rules are checked from the same fields (check_fields, in the dataclass's __post_init__, beside the
rules on combinations of options that the class states itself).

  @dataclasses.dataclass(frozen=True)
  class LoopOptions:
    save_checkpoints_steps: int = option(1000, "How often to save the model checkpoint.",
                                         OUTPUT, at_least=1)

    def __post_init__(self):
      check_fields(self)

A class whose script lacks some of the fields' flags names them in LACKS (the field keeps its
default); a subclass states the fields whose default or help differ for its script again.
TensorFlow-free: bad flags fail before TensorFlow is imported.
"""
import dataclasses

from bert_tf.errors import check_above_zero
from bert_tf.errors import check_at_least
from bert_tf.errors import check_choice
from bert_tf.errors import check_fraction
from bert_tf.errors import check_not_negative

# --help's groups, in the order it lists them.
DATA, MODEL, TRAINING, OUTPUT, RUNTIME, TPU = GROUPS = (
    "data and task", "model", "training", "output", "runtime", "TPU")
_RULES = {"at_least": check_at_least, "above_zero": check_above_zero,
          "not_negative": check_not_negative, "fraction": check_fraction}


def option(default, help_text, group=DATA, *, choices=None, at_least=None, above_zero=False,
           not_negative=False, fraction=False, kind=None, export=False, run=True):
  """A field that is a flag. choices: the values it takes (an enum flag); at_least (integers),
  above_zero, not_negative, fraction: its range; kind: the absl flag kind when the type does
  not say it ("list"); export: also a flag of export_savedmodel.py (True, or its help text
  there); run=False: of export_savedmodel.py only."""
  rules = {name: value for name, value in (
      ("at_least", at_least), ("above_zero", above_zero or None),
      ("not_negative", not_negative or None), ("fraction", fraction or None)) if value is not None}
  metadata = {"help": help_text, "group": group, "choices": tuple(choices) if choices else None,
              "rules": rules, "kind": kind, "export": export, "run": run}
  if isinstance(default, (list, dict, set)):
    return dataclasses.field(default_factory=lambda: type(default)(default), metadata=metadata)
  return dataclasses.field(default=default, metadata=metadata)


def is_flag(field):
  return "help" in field.metadata


def flag_fields(cls, export=False):
  """The fields of an options class that are flags of its script (export: of
  export_savedmodel.py), but those the class LACKS."""
  lacks = set(getattr(cls, "LACKS", ()))
  return [field for field in dataclasses.fields(cls) if is_flag(field) and
          field.name not in lacks and field.metadata["export" if export else "run"]]


def check_fields(options):
  """Each flag field's range and choices (a value of None is a flag left unset)."""
  for field in dataclasses.fields(options):
    if not is_flag(field):
      continue
    value = getattr(options, field.name)
    if value is None:
      continue
    if field.metadata["choices"]:
      check_choice(value, field.name, field.metadata["choices"])
    for rule, argument in field.metadata["rules"].items():
      if rule == "at_least":
        check_at_least(value, field.name, argument)
      else:
        _RULES[rule](value, field.name)

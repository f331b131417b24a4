"""absl's flag parsing with its errors in the project's one line (exit status 1):

  error: --num_train_epoch: not a flag of run_ner.py (did you mean --num_train_epochs?); run_ner.py --help lists its flags
  error: --num_train_epochs: expected a number, got 'abc'; run_ner.py --help lists its flags
  error: --vocab_file, --bert_config_file: required; run_ner.py --help lists its flags

in place of absl's `FATAL Flags parsing error: ...` and `Pass --helpshort or --helpfull ...`.
"""
import os
import re
import sys

from absl import flags

FLAGS = flags.FLAGS

_UNKNOWN = re.compile(r"Unknown command line flag '([^']*)'(?:\. Did you mean: (.*?) \?)?$")
_REQUIRED = re.compile(r"flag --(\w+)=None: Flag --\w+ must have a value other than None\.")
_BAD_VALUE = re.compile(r"^flag --(\w+)=(.*?): (.*)$", re.S)
_MISSING_VALUE = re.compile(r"^Missing value for flag -+(\w+)")
_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false"}


def parse(argv):
  """absl.app's flags_parser: FLAGS(argv), or one `error:` line and exit status 1."""
  try:
    return FLAGS(argv)
  except flags.Error as e:
    print(f"error: {message(e)}; {os.path.basename(argv[0])} --help lists its flags",
          file=sys.stderr)
    sys.exit(1)


def message(error):
  """`--flag: what was expected` for an absl flags.Error (its own text when it is none of the
  kinds below)."""
  text = str(error).strip()
  script = os.path.basename(sys.argv[0]) if sys.argv else "this script"
  unknown = _UNKNOWN.match(text)
  if unknown:
    name, suggestions = unknown.groups()
    hint = ""
    if suggestions:
      hint = " (did you mean " + " or ".join(f"--{s.strip()}" for s in suggestions.split(",")) + "?)"
    return f"--{name}: not a flag of {script}{hint}"
  required = _REQUIRED.findall(text)
  if required:
    return f"{', '.join(f'--{name}' for name in required)}: required"
  missing = _MISSING_VALUE.match(text)
  if missing:
    return f"--{missing.group(1)}: expected a value (--{missing.group(1)}=VALUE)"
  bad = _BAD_VALUE.match(text)
  if bad:
    name, value, why = bad.groups()
    expected = _expected(name, why)
    return (f"--{name}: {expected}, got {value!r}" if expected else
            f"--{name}={value}: {' '.join(why.split())}")
  return " ".join(text.split())


def _expected(name, why):
  """What --name takes, in words (its type, its enum's values) when absl's reason is that the
  value is not one; else None."""
  flag = FLAGS[name] if name in FLAGS else None
  parser = getattr(flag, "parser", None)
  values = getattr(parser, "enum_values", None)
  if values:
    return f"expected one of {', '.join(values)}"
  kind = _KINDS.get(parser.flag_type() if parser is not None else None)
  if kind and ("convert" in why or "invalid literal" in why or "Non-boolean" in why):
    return f"expected {kind}"
  return None

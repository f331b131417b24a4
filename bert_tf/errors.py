"""The one exception type that scripts turn into a one-line message and a non-zero exit, and the
one form of a range rule's message: "--flag: expected ..., got value" (check and its kinds below,
which the options of every layer call beside the option they constrain)."""


class BertTfError(ValueError):
  """Bad input from the user: names the file or flag and what was expected."""


def check(ok, flag, expected, value):
  """Raises BertTfError "--flag: expected ..., got value" unless ok."""
  if not ok:
    raise BertTfError(f"--{flag}: expected {expected}, got {value}")


def check_at_least(value, flag, minimum):
  """An integer flag's lower bound (None is left alone: the flag was not given)."""
  if value is not None:
    check(value >= minimum, flag, f"an integer of at least {minimum}", value)


def check_not_negative(value, flag):
  check(value >= 0, flag, "a number of at least 0", value)


def check_above_zero(value, flag):
  check(value > 0, flag, "a number above 0", value)


def check_fraction(value, flag):
  check(0 <= value <= 1, flag, "a fraction between 0 and 1", value)


def check_choice(value, flag, choices):
  check(value in choices, flag, f"one of {', '.join(choices)}", value)


def op_message(message):
  """What a TensorFlow error's message says (its first line of substance), without the op and
  graph decoration around it ("Graph execution error:", "{{function_node ...}}", " [Op:...]")."""
  lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
  lines = [line for line in lines if not line.startswith(("Graph execution error", "Detected at",
                                                           "File ", "[[", "{{node"))]
  text = lines[0] if lines else ""
  text = text.split("}} ", 1)[-1] if text.startswith("{{function_node") else text
  return text.split(" [Op:")[0].strip()

"""The one exception type that scripts turn into a one-line message and a non-zero exit."""


class BertTfError(ValueError):
  """Bad input from the user: names the file or flag and what was expected."""


def op_message(message):
  """What a TensorFlow error's message says (its first line of substance), without the op and
  graph decoration around it ("Graph execution error:", "{{function_node ...}}", " [Op:...]")."""
  lines = [line.strip() for line in (message or "").splitlines() if line.strip()]
  lines = [line for line in lines if not line.startswith(("Graph execution error", "Detected at",
                                                           "File ", "[[", "{{node"))]
  text = lines[0] if lines else ""
  text = text.split("}} ", 1)[-1] if text.startswith("{{function_node") else text
  return text.split(" [Op:")[0].strip()

"""The one exception type that scripts turn into a one-line message and a non-zero exit."""


class BertTfError(ValueError):
  """Bad input from the user: names the file or flag and what was expected."""

"""What a script printed, as a person reads it: TensorFlow's chatter that must not show (its C++
log and absl's prefixes), and the figures of the closing summary."""
import re

# A line TensorFlow's C++ code, absl's full prefix or TensorFlow's own Python handler wrote.
CHATTER = re.compile(r"^(?:[IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
                     r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
                     r"|WARNING: All log messages before absl::InitializeLog"
                     r"|(?:INFO|WARNING|ERROR):tensorflow:)")
# One of our log lines: `HH:MM:SS message`.
OURS = re.compile(r"^\d\d:\d\d:\d\d ")
_FIGURE = re.compile(r"^\d\d:\d\d:\d\d +(\S[^=]*?) = (\S+)$")


def chatter(text):
  """The lines of `text` that are TensorFlow's or absl's chatter."""
  return [line for line in text.splitlines() if CHATTER.match(line)]


def closing_figures(text):
  """{name: value as printed} of the `name = value` lines after the last `***** Finished`."""
  lines = text.splitlines()
  starts = [i for i, line in enumerate(lines) if "***** Finished" in line]
  assert starts, "no closing summary:\n" + "\n".join(lines[-20:])
  found = {}
  for line in lines[starts[-1]:]:
    match = _FIGURE.match(line)
    if match:
      found[match[1]] = match[2]
  return found


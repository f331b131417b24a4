"""docs/flags.md: every script's --help, as the script prints it, in one page.

  python tests/support/flag_reference.py           rewrites docs/flags.md
  python tests/support/flag_reference.py --check   exits 1 when docs/flags.md is stale

One process imports TensorFlow and the library once, then forks one child per script that runs it
as `python SCRIPT --help` would (the script's own define_flags, its required marks, the grouped
help), its output into a pipe: the ten scripts cost one TensorFlow import, not ten.
tests/test_docs.py makes the page again from the scripts' --help run through the tests' script
runner (forks of one process too), compares it with the file, and reads the flags it lists.
"""
import os
import re
import runpy
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PAGE = os.path.join(REPO, "docs", "flags.md")
# In the order a user meets them: data, pretraining, fine-tuning (each registered task's script),
# then what uses a model.
BEFORE_TASKS = ("create_vocab.py", "create_pretraining_data.py", "run_pretraining.py")
AFTER_TASKS = ("extract_features.py", "export_savedmodel.py", "convert_checkpoint.py")


def scripts():
  """Every top-level script, the fine-tuning ones as the task registry finds them."""
  from bert_tf.tasks import base  # pylint: disable=g-import-not-at-top
  return BEFORE_TASKS + tuple(base.get(name).script for name in base.names()) + AFTER_TASKS


def is_script(path):
  """Whether `path` names one of the top-level scripts (a .py file at the repository's root)."""
  name = os.path.basename(path)
  return name.endswith(".py") and os.path.isfile(os.path.join(REPO, name))
# Imported once before forking; each child then only runs its script's module body.
_HEAVY = ("tensorflow", "tf_keras", "tensorflow_text", "bert_tf.cli.app", "bert_tf.drivers.finetuning",
          "bert_tf.drivers.pretraining", "bert_tf.drivers.feature_extraction", "bert_tf.serving.export",
          "bert_tf.model.checkpoints", "bert_tf.text.vocab_learning",
          "bert_tf.data.pretraining_data.pipeline")

_HEADER = """# Flag reference

Every script's `--help`, as it prints it: the flags in groups (data and task, model, training,
output, runtime, TPU), `[required]` before the ones a run cannot start without. The flags of
Google's original scripts keep their names, defaults and help texts. Which flags matter for a job,
and what to expect from them: the job's page ([README](../README.md#jobs)).

This page is generated from the scripts (`python tests/support/flag_reference.py`);
`tests/test_docs.py` fails when it is out of date.

"""


def _help_of(script):
  """In a forked child: runs SCRIPT --help, its stdout on a pipe; returns (pid, the read end)."""
  read, write = os.pipe()
  pid = os.fork()
  if pid == 0:
    code = 1
    try:
      os.close(read)
      os.dup2(write, 1)
      devnull = os.open(os.devnull, os.O_WRONLY)
      os.dup2(devnull, 2)
      sys.argv = [script, "--help"]
      sys.path[0] = REPO
      runpy.run_path(os.path.join(REPO, script), run_name="__main__")
    except SystemExit as e:
      code = e.code if isinstance(e.code, int) else 0
    finally:
      sys.stdout.flush()
      sys.stderr.flush()
      os._exit(code)
  os.close(write)
  return pid, read


def help_texts():
  """{script: its --help text}, the scripts run in parallel children of this process."""
  os.environ["TF_USE_LEGACY_KERAS"] = "1"
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  if REPO not in sys.path:
    sys.path.insert(0, REPO)
  for name in _HEAVY:
    __import__(name)
  children = {script: _help_of(script) for script in scripts()}
  texts = {}
  for script, (pid, read) in children.items():
    with os.fdopen(read, encoding="utf-8") as f:
      texts[script] = f.read()
    _, status = os.waitpid(pid, 0)
    # absl ends --help with exit status 1.
    if os.waitstatus_to_exitcode(status) not in (0, 1) or "\nflags:\n" not in texts[script]:
      raise RuntimeError(f"{script} --help failed:\n{texts[script][-2000:]}")
  return texts


def _body(text):
  """The help as shown (absl's 'flags:' line and closing hint dropped)."""
  lines = [line.rstrip() for line in text.splitlines()
           if line.strip() not in ("flags:", "Try --helpfull to get a list of all flags.")]
  return "\n".join(lines).strip("\n")


def page(texts):
  """docs/flags.md's text for these help texts."""
  parts = [_HEADER, "Scripts: " + ", ".join(
      f"[{script}](#{script.replace('.', '')})" for script in texts) + ".\n"]
  for script in texts:
    parts.append(f"\n## {script}\n\n```text\n{_body(texts[script])}\n```\n")
  return "".join(parts)


def flags_by_script(text):
  """{script: set of flag names} as a docs/flags.md text lists them (`--name`; booleans add
  `noname`)."""
  found = {}
  for script, body in re.findall(r"^## (\S+\.py)\n\n```text\n(.*?)^```", text, flags=re.M | re.S):
    names = set()
    for negatable, name in re.findall(r"^  --(\[no\])?(\w+):", body, flags=re.M):
      names.add(name)
      if negatable:
        names.add(f"no{name}")
    found[script] = names | {"help", "helpshort", "helpfull", "flagfile"}
  return found


def main(argv):
  text = page(help_texts())
  if "--check" in argv:
    with open(PAGE, encoding="utf-8") as f:
      if f.read() != text:
        print(f"{PAGE} is out of date: python tests/support/flag_reference.py", file=sys.stderr)
        return 1
    return 0
  with open(PAGE, "w", encoding="utf-8") as f:
    f.write(text)
  print(f"wrote {PAGE}")
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))

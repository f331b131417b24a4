"""--help as a user reads it: the flags grouped (data and task, model, training, output,
runtime, TPU), the required ones marked, each flag once."""
import re

import pytest

from support.script_runner import run_script

GROUPS = ["data and task", "model", "training", "output", "runtime", "TPU"]


def help_text(script):
  result = run_script(script, "--help", timeout=120)
  return result.stdout + result.stderr


@pytest.mark.parametrize("script,required,groups", [
    ("run_classifier.py", {"data_dir", "task_name", "output_dir"}, GROUPS),
    ("create_pretraining_data.py", {"input_file", "output_file", "vocab_file"},
     ["data and task", "model", "output", "runtime"]),
    ("create_vocab.py", {"input_file", "output_file"}, ["data and task", "model", "output"]),
])
def test_help_groups_flags_and_marks_the_required(script, required, groups):
  text = help_text(script)
  headers = re.findall(r"^(\S.*) flags:$", text, flags=re.M)
  assert headers == groups, text[:2000]
  flags_shown = re.findall(r"^  --(?:\[no\])?(\w+):", text, flags=re.M)
  assert len(flags_shown) == len(set(flags_shown)), "a flag listed twice"
  marked = set(re.findall(r"^  --(\w+): \[required\]", text, flags=re.M))
  assert marked == required
  sections = dict(zip(headers, re.split(r"^\S.* flags:$", text, flags=re.M)[1:]))
  if "TPU" in sections:
    assert "--tpu_name" in sections["TPU"] and "--learning_rate" in sections["training"]
    assert "--tpu_name" not in sections["training"]
    for name in ("eval_every_n_steps", "keep_best_metric", "early_stopping_patience"):
      assert f"--{name}" in sections["training"], name

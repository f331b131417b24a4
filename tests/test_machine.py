"""bert_tf.training.machine: the CPU read from /proc/cpuinfo, oneDNN turned on where it wins (a value
the user set stands, and so does TensorFlow once imported), the cache of measured choices, and
the turns of a timing."""
import json
import os
import subprocess
import sys

from bert_tf.training import machine
from support.paths import REPO

CPUINFO = """processor\t: 0
model name\t: Test CPU 9000
flags\t\t: fpu sse4_2 avx avx2 fma
processor\t: 1
model name\t: Test CPU 9000
flags\t\t: fpu sse4_2 avx avx2 fma
"""


def test_cpu_and_its_key(tmp_path):
  (tmp_path / "cpuinfo").write_text(CPUINFO)
  info = machine.cpu(str(tmp_path / "cpuinfo"))
  assert info["model"] == "Test CPU 9000"
  assert info["flags"] == {"fpu", "sse4_2", "avx", "avx2", "fma"}
  assert info["threads"] == len(os.sched_getaffinity(0))
  key = machine.machine_key(info)
  assert key["cpu"] == "Test CPU 9000" and json.loads(json.dumps(key)) == key
  assert machine.machine_key(dict(info, flags=info["flags"] | {"avx512f"})) != key
  missing = machine.cpu(str(tmp_path / "absent"))
  assert missing["flags"] == frozenset() and missing["model"]


def test_onednn_where_it_wins_and_the_users_setting_stands(monkeypatch):
  monkeypatch.delitem(sys.modules, "tensorflow", raising=False)  # as before TensorFlow's import
  environ = {}
  assert "=1" in machine.prefer_onednn(environ, flags={"avx", "avx2", "fma"})
  assert environ == {"TF_ENABLE_ONEDNN_OPTS": "1"}
  environ = {}
  assert "no AVX2" in machine.prefer_onednn(environ, flags={"sse4_2", "avx"})
  assert environ == {}
  environ = {"TF_ENABLE_ONEDNN_OPTS": "0"}
  assert "as set" in machine.prefer_onednn(environ, flags={"avx2", "fma"})
  assert environ == {"TF_ENABLE_ONEDNN_OPTS": "0"}


def test_nothing_changes_after_tensorflows_import():
  import tensorflow  # noqa: F401  pylint: disable=g-import-not-at-top,unused-import
  environ = {}
  assert "imported before" in machine.prefer_onednn(environ, flags={"avx2", "fma"})
  assert environ == {}


def test_the_predictor_gets_onednn_where_it_wins():
  """A new process that imports the predictor first, as a user's program does, runs TensorFlow
  with oneDNN on where it wins on this CPU."""
  environ = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
  code = ("import os; from bert_tf.serving import predictor; from bert_tf.model import "
          "activations; print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'), "
          "activations.onednn_enabled())")
  done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environ,
                        capture_output=True, text=True, timeout=300, check=True)
  wins = machine.onednn_wins(machine.cpu()["flags"])
  assert done.stdout.split()[-2:] == (["1", "True"] if wins else ["None", "False"])


def test_choices_are_kept_per_key(tmp_path):
  choices = machine.Choices("kind", directory=str(tmp_path / "cache"), limit=2)
  assert choices.get({"a": 1}) is None
  assert choices.put({"a": 1, "b": [2, 3]}, {"backend": "x"})
  assert choices.get({"b": [2, 3], "a": 1}) == {"backend": "x"}  # key order does not matter
  assert machine.Choices("kind", directory=str(tmp_path / "cache")).get(
      {"a": 1, "b": [2, 3]}) == {"backend": "x"}
  assert choices.get({"a": 2}) is None
  choices.put({"a": 2}, "y")
  choices.put({"a": 3}, "z")  # the limit: the oldest goes
  assert [choices.get({"a": 2}), choices.get({"a": 3})] == ["y", "z"]
  assert choices.get({"a": 1, "b": [2, 3]}) is None
  assert sorted(os.listdir(tmp_path / "cache")) == ["kind.json"]


def test_a_damaged_cache_counts_as_empty(tmp_path):
  (tmp_path / "kind.json").write_text("{not json")
  choices = machine.Choices("kind", directory=str(tmp_path))
  assert choices.get({"a": 1}) is None
  assert choices.put({"a": 1}, 5) and choices.get({"a": 1}) == 5


def test_cache_directory(monkeypatch, tmp_path):
  assert machine.cache_dir({"BERT_TF_CACHE_DIR": "/x"}) == "/x"
  assert machine.cache_dir({"XDG_CACHE_HOME": "/y"}) == os.path.join("/y", "bert_tf")
  monkeypatch.setenv("HOME", str(tmp_path))
  assert machine.cache_dir({}) == os.path.join(str(tmp_path), ".cache", "bert_tf")


def test_time_in_turns():
  calls = []
  seconds = machine.time_in_turns({"a": lambda: calls.append("a"),
                                   "b": lambda: calls.append("b")}, rounds=3)
  assert calls == ["a", "b"] * 3
  assert {name: len(s) for name, s in seconds.items()} == {"a": 3, "b": 3}
  assert all(s >= 0 for values in seconds.values() for s in values)

"""create_pretraining_data as a Beam pipeline on the DirectRunner: the local run's files, byte for byte.

apache-beam is optional (requirements-test.txt installs it); without it these tests are skipped.
"""
import os
import random

import pytest

apache_beam = pytest.importorskip("apache_beam")

from support.paths import REPO, shared_data  # noqa: E402
from support.script_runner import run_script  # noqa: E402

from bert_tf.data.pretraining_data import algorithm  # noqa: E402
from bert_tf.data.pretraining_data import beam  # noqa: E402
from bert_tf.data.pretraining_data import pipeline  # noqa: E402
from bert_tf.model import objectives  # noqa: E402
from bert_tf.text import tokenization  # noqa: E402

# Tiny: 4 files of 8 documents, one copy each; the cost is Beam's start-up, not the data.
OPTIONS = algorithm.Options(dupe_factor=1, max_seq_length=64,
                            masking=objectives.Masking(max_predictions_per_seq=10))


def _vocab_file():
  return os.path.join(shared_data("vocab"), "bert-base-uncased-vocab.txt")


def _inputs(tmp_path, files=4, documents=8):
  words = ["the", "cat", "sat", "on", "a", "mat", "unaffable", "running", "quickly", "dog", "ran", "home"]
  paths = []
  for i in range(files):
    rng = random.Random(i)
    lines = []
    for _ in range(documents):
      for _ in range(rng.randint(1, 6)):
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) + ".")
      lines.append("")
    path = tmp_path / f"part{i}.txt"
    path.write_text("\n".join(lines) + "\n")
    paths.append(str(path))
  return paths


def _local(inputs, outputs, num_shards, options=OPTIONS):
  tokenizer = tokenization.FullTokenizer(_vocab_file(), do_lower_case=True)
  return pipeline.run_shards(inputs, outputs, tokenizer, options, num_shards, progress_seconds=None)


def _beam(inputs, outputs, num_shards, *pipeline_args):
  return beam.run(inputs, outputs, _vocab_file(), True, OPTIONS, num_shards, "DirectRunner",
                              list(pipeline_args), progress_seconds=None)


def _files(directory):
  return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))}


def test_shards_are_the_local_shards_and_a_rerun_redoes_only_missing_ones(tmp_path):
  inputs = _inputs(tmp_path)
  for name in ("local", "beam"):
    os.makedirs(tmp_path / name)
  assert _local(inputs, [str(tmp_path / "local" / "pre.tfrecord")], 3) == [0, 1, 2]
  out = str(tmp_path / "beam" / "pre.tfrecord")
  assert _beam(inputs, [out], 3) == [0, 1, 2]
  local = _files(tmp_path / "local")
  assert list(local) == [f"pre.tfrecord-0000{i}-of-00003" for i in range(3)]
  assert _files(tmp_path / "beam") == local
  os.remove(out + "-00001-of-00003")
  assert _beam(inputs, [out], 3) == [1]
  assert _files(tmp_path / "beam") == local
  assert _beam(inputs, [out], 3) == []


def test_one_shard_is_the_local_single_run(tmp_path):
  inputs = _inputs(tmp_path, files=2)
  for name in ("local", "beam"):
    os.makedirs(tmp_path / name)
  _local(inputs, [str(tmp_path / "local" / f"pre.{i}.tfrecord") for i in range(2)], 1)
  assert _beam(inputs, [str(tmp_path / "beam" / f"pre.{i}.tfrecord") for i in range(2)], 1) == [0]
  local = _files(tmp_path / "local")
  assert list(local) == ["pre.0.tfrecord", "pre.1.tfrecord"] and all(local.values())
  assert _files(tmp_path / "beam") == local


def test_multi_processing_direct_runner(tmp_path, monkeypatch):
  # Its workers are fresh Python processes: they import bert_tf from the repository.
  monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
  inputs = _inputs(tmp_path, files=3)
  for name in ("local", "beam"):
    os.makedirs(tmp_path / name)
  _local(inputs, [str(tmp_path / "local" / "pre.tfrecord")], 2)
  assert _beam(inputs, [str(tmp_path / "beam" / "pre.tfrecord")], 2, "--direct_running_mode=multi_processing",
               "--direct_num_workers=2") == [0, 1]
  assert _files(tmp_path / "beam") == _files(tmp_path / "local")


def _script(*args):
  return run_script("create_pretraining_data.py", *args)


def test_script_with_beam_runner(tmp_path):
  inputs = _inputs(tmp_path)
  for name in ("local", "beam"):
    os.makedirs(tmp_path / name)
  common = [f"--input_file={','.join(inputs)}", f"--vocab_file={_vocab_file()}", "--dupe_factor=1",
            f"--output_file={tmp_path / 'beam' / 'pre.tfrecord'}", "--beam_runner=DirectRunner"]
  result = _script(*common, "--num_shards=2")
  assert result.returncode == 0, result.stderr
  _local(inputs, [str(tmp_path / "local" / "pre.tfrecord")], 2, algorithm.Options(dupe_factor=1))
  assert list(_files(tmp_path / "beam")) == ["pre.tfrecord-00000-of-00002", "pre.tfrecord-00001-of-00002"]
  assert _files(tmp_path / "beam") == _files(tmp_path / "local")
  result = _script(*common, "--num_shards=2", "--shard_index=0")
  assert result.returncode != 0
  assert result.stderr.strip().splitlines()[-1].startswith("error: --shard_index:"), result.stderr

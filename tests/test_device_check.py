"""bench/device_check/device_check.sh, the GPU check, dry-run on the CPU so that it cannot rot:
every step prints its one line, the summary tables are written, and a missing TensorFlow is one
line, after which the steps that need it say so and the summary is still written."""
import json
import os
import random
import re
import subprocess
import sys

from bert_tf.training import machine
from bert_tf.training import precision
from support import script_runner
from support.paths import REPO

sys.path[:0] = [os.path.join(REPO, "bench", "device_check"), os.path.join(REPO, "bench")]
import device_check_report  # noqa: E402  pylint: disable=g-import-not-at-top

SCRIPT = os.path.join(REPO, "bench", "device_check", "device_check.sh")
STEPS = ("setup", "devices", "parity", "pretraining", "mrpc", "serving", "summary")


def write_mrpc(directory, seed=1):
  """A tiny MRPC in GLUE's layout (BOM and header included): paraphrases are label 1."""
  rng = random.Random(seed)
  words = "the cat sat on a mat dog ran far away quickly slowly big small red blue".split()
  os.makedirs(directory)
  for name, n in (("train.tsv", 16), ("dev.tsv", 8)):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
      f.write("\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n")
      for i in range(n):
        a = " ".join(rng.choice(words) for _ in range(rng.randint(4, 9)))
        b = a if i % 2 else " ".join(rng.choice(words) for _ in range(5))
        f.write(f"{i % 2}\t{i}\t{i + 100}\t{a} .\t{b} .\n")
  return directory


def step_lines(stdout):
  """{step name: (status, result)} of the `[N name] STATUS (s): result` lines, each once."""
  found = {}
  for line in stdout.splitlines():
    for number, name in enumerate(STEPS):
      prefix = f"[{number} {name}] "
      if line.startswith(prefix):
        assert name not in found, f"step {name} printed twice"
        status, _, result = line[len(prefix):].partition(": ")
        found[name] = (status.split(" (")[0], result)
  return found


def run_check(tmp_path, *flags, python=None, timeout=600):
  env = dict(os.environ, PY=sys.executable)
  if python is None:  # the steps' scripts through the tests' fork server (TensorFlow imported once)
    env.update(script_runner.server_environment())
    python = f"{sys.executable} {os.path.join(REPO, 'tests', 'support', 'script_runner.py')}"
  return subprocess.run(["bash", SCRIPT, f"--out_dir={tmp_path / 'out'}", f"--python={python}",
                         *flags], cwd=REPO, env=env, text=True, capture_output=True,
                        timeout=timeout)


def test_dry_run_prints_every_step_and_writes_the_tables(tmp_path):
  mrpc = write_mrpc(str(tmp_path / "MRPC"))
  done = run_check(tmp_path, "--dry_run", f"--mrpc_dir={mrpc}", "--cpu_mrpc_accuracy=0.5",
                   f"--work_dir={tmp_path / 'work'}")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  found = step_lines(done.stdout)
  assert list(found) == list(STEPS), done.stdout[-3000:]
  assert {status for status, _ in found.values()} == {"OK"}, found
  assert "parity tests found" in found["parity"][1]
  assert "float16+packed " in found["pretraining"][1] and " seq/s" in found["pretraining"][1]
  assert "auto accuracy " in found["mrpc"][1] and "CPU float32: 0.5000" in found["mrpc"][1]
  # The script-level test of --dtype=auto: run_classifier here (no GPU) picks a dtype and says
  # why in one line, as this machine's CPU calls for: float32 without bfloat16 instructions; with
  # them, what the probe measured decides (the line says the times); the export of step 5
  # resolves auto the same way.
  cpuinfo = machine.read_cpuinfo()
  classifier_log = (tmp_path / "work" / "logs" / "mrpc_auto.log").read_text()
  [(chosen, why)] = re.findall(r"--dtype=auto: (\w+) \((.*)\)$", classifier_log, flags=re.M)
  if precision.cpu_bf16_flags(cpuinfo):
    measured = re.search(r"ms in bfloat16 and \d+ ms in float32 \((\d+\.\d+)x\)", why)
    assert measured, why
    speedup = float(measured[1])
    if abs(speedup - precision.MIN_BF16_SPEEDUP) > 0.01:  # not rounded across the line
      assert chosen == ("bfloat16" if speedup >= precision.MIN_BF16_SPEEDUP else "float32")
  else:
    assert (chosen, why) == precision.choose("auto", "cpu", (), cpuinfo)
  assert "exported with --dtype=auto" in found["serving"][1]
  assert "batch-1 p50 " in found["serving"][1] and "pairs/s" in found["serving"][1]
  out = tmp_path / "out"
  summary = (out / "device_check_summary.md").read_text()
  assert "| float16 | no | yes |" in summary
  assert "| auto | 0." in summary  # the MRPC row
  assert "Compare with: NVIDIA DeepLearningExamples" in summary
  log = (out / "device_check.log").read_text()
  assert all(line in log for line in done.stdout.splitlines() if line.startswith("["))
  results = json.loads((out / "device_check.json").read_text())
  assert [s[1] for s in results["steps"]] == list(STEPS[:-1])
  runs = results["facts"]["pretraining"]
  assert len(runs) == 1 and all(r["sequences_per_s"] > 0 and r["loss"] > 0 for r in runs)
  assert not (tmp_path / "work" / "pretrain_float16_packed").exists()  # its checkpoints go


def test_without_tensorflow_each_step_still_prints_its_line(tmp_path):
  """A Python that cannot import TensorFlow (here: one without site-packages, pip included):
  step 0 tries to install from the (empty) wheelhouse, says in one line that TensorFlow is
  missing and why, steps 2-5 are skipped, and the summary is written."""
  wheelhouse = tmp_path / "wheels"
  wheelhouse.mkdir()
  done = run_check(tmp_path, f"--wheelhouse={wheelhouse}", "--budget_s=60",
                   python=f"{sys.executable} -I -S")
  assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
  found = step_lines(done.stdout)
  assert list(found) == list(STEPS), done.stdout
  assert f"--no-index --find-links {wheelhouse} -r " in done.stdout  # the install it tried
  assert "tensorflow[and-cuda]==2.20.*" in done.stdout
  assert found["setup"][0] == "FAIL" and "TensorFlow is missing" in found["setup"][1]
  assert "pip install failed: " in found["setup"][1]
  assert "TensorFlow: missing" in found["devices"][1]
  for name in ("parity", "pretraining", "mrpc", "serving"):
    assert found[name] == ("SKIP", "TensorFlow is missing (step 0)")
  summary = (tmp_path / "out" / "device_check_summary.md").read_text()
  assert "| 0 setup | FAIL |" in summary
  assert "Compare with: NVIDIA DeepLearningExamples" in summary  # the row, without our figures


def test_summary_of_gpu_figures_speed_ups_and_the_nvidia_row():
  """The tables a GPU run writes, from figures given here (the dry run measures one config)."""
  sizes = dict(model="BERT-Base", config=dict(hidden_size=768, num_hidden_layers=12,
                                              intermediate_size=3072, vocab_size=30522),
               seq=128, preds=20, batch=128, steps=100)
  runs = [dict(dtype="float32", xla=False, packed=False, rows_per_s=1000.0,
               sequences_per_s=1000.0, status="ok"),
          dict(dtype="bfloat16", xla=False, packed=False, rows_per_s=2000.0,
               sequences_per_s=2000.0, status="ok"),
          dict(dtype="bfloat16", xla=True, packed=False, rows_per_s=3000.0,
               sequences_per_s=3000.0, status="ok"),
          dict(dtype="bfloat16", xla=True, packed=True, rows_per_s=2900.0,
               sequences_per_s=8700.0, status="ok"),
          dict(dtype="float16", xla=True, packed=True, status="skipped: budget spent")]
  text = "\n".join(device_check_report.pretraining_lines(runs, sizes, "NVIDIA H100 80GB HBM3"))
  assert "- bfloat16 / float32 (no XLA, unpacked): 2.00x" in text
  assert "- --use_xla / without, bfloat16: 1.50x" in text
  assert "- packed / unpacked sequences/s, bfloat16 XLA: 2.90x" in text
  assert "| float16 | yes | yes |  |  |  |  |  | skipped: budget spent |" in text
  flops = device_check_report.train_flops_per_sequence(sizes["config"], 128, 20)
  assert 6e10 < flops < 7.5e10  # ~6 x 85M encoder weights x 128 tokens, plus attention
  large = device_check_report.train_flops_per_sequence(device_check_report.BERT_LARGE, 128, 20)
  assert "485.59 sequences/s mixed precision" in text
  assert f"costs {large / flops:.1f}x the training FLOPs" in text
  best = 3000 * flops / 1e12  # the best mixed run by rows/s: bfloat16 XLA unpacked
  assert f"= {best:.3g} model TFLOP/s, {best / 989.4:.0%} of its peak" in text
  mrpc = "\n".join(device_check_report.mrpc_lines(
      [dict(dtype="float32", accuracy=0.84, f1=0.88, status="ok"),
       dict(dtype="bfloat16", accuracy=0.83, f1=0.87, status="ok")], 0.845))
  assert "| bfloat16 | 0.8300 | 0.8700 | -0.0150 | -0.0100 | ok |" in mrpc


def test_summary_names_the_gpu_that_nvidia_smi_sees_when_tensorflow_is_missing(tmp_path):
  """As on a lent H200: nvidia-smi sees the card, TensorFlow is not installed."""
  class Out:
    out_dir = str(tmp_path)
    lines = []

    def line(self, text):
      self.lines.append(text)

  class Args:
    dry_run = False
    cpu_mrpc_accuracy = None

  sizes = dict(model="BERT-Base", config=device_check_report.BERT_LARGE, seq=128, preds=20,
               batch=128, steps=100)
  facts = dict(nvidia_smi=["NVIDIA H200, 143771 MiB, 580.159.04, 9.0"], pretrain_sizes=sizes)
  device_check_report.write_summary(Out(), [(0, "setup", "FAIL", 0.1, "TensorFlow is missing")],
                                    facts, Args())
  head = (tmp_path / "device_check_summary.md").read_text().splitlines()[0]
  assert head.endswith(", NVIDIA H200 (nvidia-smi; TensorFlow sees none)"), head

"""bench/bench_mrpc_dtype.py without running it: the command it gives run_classifier.py (the MRPC
flags of docs/classification.md), the timing read from a run's log, the table and the paired
losses."""
import os
import sys
import types

from support import readme
from support.paths import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_mrpc_dtype as bench  # noqa: E402

LOG = """I1126 23:59:50.000000 1 scalars.py:73] Building and compiling the training step (...)...
I1126 23:59:58.000000 1 scalars.py:86] First step done in 0:00:08
I1127 00:00:08.000000 1 scalars.py:132] step 2/5 loss 0.7, learning_rate 1e-05, accuracy 0.5
I1127 00:00:28.000000 1 scalars.py:132] step 5/5 loss {last}, learning_rate 0, accuracy 0.7
"""


def test_the_docs_mrpc_command_is_the_benchs():
  """The bench measures the MRPC command of docs/classification.md: its flags are the command's."""
  command = next(line for language, code, _ in readme.blocks("docs/classification.md")
                 if language == "bash" for line in readme.logical_lines(code)
                 if "--task_name=MRPC" in line and "run_classifier.py" in line)
  args = types.SimpleNamespace(quick=False, extra_flags=[])
  flags = bench.command(args, "/m", "/d", "float32", 1, "/o")
  for flag in bench.README_FLAGS:
    assert flag in command.split(), flag
  assert "--dtype=float32" in flags and "--seed=1" in flags and "--pack_sequences" in flags


def test_timing_table_and_paired_losses(tmp_path):
  for dtype, last in (("float32", "0.5"), ("bfloat16", "0.5003")):
    (tmp_path / f"{dtype}_seed1.log").write_text(LOG.format(last=last))
  # Past midnight: 38 s from the start of the first step, 4 steps in the 30 s after it.
  seconds, rate, steps = bench.train_timing(str(tmp_path / "float32_seed1.log"))
  assert (seconds, steps) == (38.0, 5) and abs(rate - 4 / 30) < 1e-9
  assert bench.step_losses(str(tmp_path / "bfloat16_seed1.log")) == {(0, 2): 0.7, (2, 5): 0.5003}
  [line] = bench.paired_losses(str(tmp_path), [1], ["float32", "bfloat16"])
  assert "(2 lines, to step 5): max difference 0.0003 (at step 5)" in line
  # A line that averages other steps than its peer's is not compared.
  (tmp_path / "bfloat16_seed1.log").write_text(LOG.format(last="0.9").replace(" step 2/5", " x"))
  assert not bench.paired_losses(str(tmp_path), [1], ["float32", "bfloat16"])
  runs = [dict(dtype=d, seed=s, accuracy=a, f1=0.8, steps=5, train_seconds=38.0,
               steps_per_second=0.1, wall_seconds=60.0)
          for d, s, a in (("float32", 1, 0.75), ("float32", 2, 0.8), ("bfloat16", 1, 0.7))]
  text = bench.table(runs, ["float32", "bfloat16"])
  assert "| float32 mean (min-max) | 2 seeds | 0.7750 (0.7500-0.8000) |" in text
  assert "| bfloat16 | 1 | 0.7000 | 0.8000 | 5 | 38 s | 0.100 | 60 s |" in text

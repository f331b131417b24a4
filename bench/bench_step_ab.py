"""Training-step speed of two checkouts of this repository, alternating, on the same records.

Timings on this shared machine drift by tens of percent between runs, so a change to the training
step is judged by running the old and the new code one after the other, several rounds:

  git worktree add /tmp/before <old commit>
  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_step_ab.py \
      --repos=/tmp/before,. --model=small --dtypes=float32,bfloat16 --steps=10 --rounds=2

Each measurement is one process running bench_pretraining.time_ours (bert_tf.training.train on
synthetic pretraining records, --steps timed steps after as many untimed) with that checkout's
code. Prints sequences/s per run and the mean ratio of the last repo to the first.
"""
import argparse
import os
import subprocess
import sys

CHILD = """
import os, sys, tempfile
repo, model, dtype, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
sys.path[:0] = [repo, os.path.join(repo, "bench")]
from absl import flags
import bench_pretraining as bp
flags.FLAGS(["bench_step_ab", f"--steps={steps}"])
work = tempfile.mkdtemp()
records = os.path.join(work, "records.tfrecord")
bp.write_records(records, 256, 128, 20)
batch = bp.FLAGS.base_batch_size if model == "base" else bp.FLAGS.small_batch_size
print("SEQS", bp.time_ours(bp.config_for(model), batch, dtype, False, records, work))
"""


def measure(repo, model, dtype, steps):
  out = subprocess.run([sys.executable, "-c", CHILD, os.path.abspath(repo), model, dtype,
                        str(steps)], capture_output=True, text=True, check=True).stdout
  return float([line for line in out.splitlines() if line.startswith("SEQS")][-1].split()[1])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repos", required=True, help="comma-separated checkouts, first = baseline")
  parser.add_argument("--model", default="small", choices=["small", "base"])
  parser.add_argument("--dtypes", default="float32,bfloat16")
  parser.add_argument("--steps", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=2)
  args = parser.parse_args()
  repos = args.repos.split(",")
  for dtype in args.dtypes.split(","):
    results = {repo: [] for repo in repos}
    for _ in range(args.rounds):
      for repo in repos:
        results[repo].append(measure(repo, args.model, dtype, args.steps))
        print(f"{args.model} {dtype} {repo}: {results[repo][-1]:.2f} seq/s", flush=True)
    mean = {repo: sum(v) / len(v) for repo, v in results.items()}
    print(f"{args.model} {dtype}: {repos[-1]} / {repos[0]} = {mean[repos[-1]] / mean[repos[0]]:.2f}x")


if __name__ == "__main__":
  main()

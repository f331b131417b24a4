"""Training-step speed of two checkouts of this repository, alternating, on the same records.

Timings on this shared machine drift by tens of percent between runs, so a change to the training
step is judged by running the old and the new code one after the other, several rounds:

  git worktree add /tmp/before <old commit>
  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_step_ab.py \
      --repos=/tmp/before,. --model=small --dtypes=float32,bfloat16 --steps=10 --rounds=2

Each measurement is one process running bench_pretraining.time_ours (bert_tf.training.loop.train on
synthetic pretraining records, --steps timed steps after as many untimed) with that checkout's
code. Prints sequences/s per run and the mean ratio of the last repo to the first.
"""
import os
import subprocess
import sys

import bench_env  # noqa: F401  (first: the environment every bench runs in)
import harness

# The child runs the checkout's own bench_pretraining, whose flags are harness.Flags since the
# bench harness (issue 33) and absl flags before it.
CHILD = """
import os, sys, tempfile
repo, model, dtype, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
sys.path[:0] = [repo, os.path.join(repo, "bench")]
import bench_pretraining as bp
if hasattr(bp, "harness"):
  bp.FLAGS.parse([f"--steps={steps}"])
else:
  bp.FLAGS(["bench_step_ab", f"--steps={steps}"])
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


FLAGS = harness.Flags()
FLAGS.strings("repos", None, "Checkouts, first = baseline.", required=True)
FLAGS.string("model", "small", "bench_configs model.", choices=["small", "base"])
FLAGS.strings("dtypes", "float32,bfloat16", "Precisions to time.")
FLAGS.integer("steps", 10, "Timed steps per run (as many untimed before).")
FLAGS.integer("rounds", 2, "Rounds (one run of each repo per round).")


def main(_):
  args, repos = FLAGS, FLAGS.repos
  for dtype in args.dtypes:
    results = {repo: [] for repo in repos}
    for _ in range(args.rounds):
      for repo in repos:
        results[repo].append(measure(repo, args.model, dtype, args.steps))
        print(f"{args.model} {dtype} {repo}: {results[repo][-1]:.2f} seq/s", flush=True)
    mean = {repo: sum(v) / len(v) for repo, v in results.items()}
    print(f"{args.model} {dtype}: {repos[-1]} / {repos[0]} = {mean[repos[-1]] / mean[repos[0]]:.2f}x")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

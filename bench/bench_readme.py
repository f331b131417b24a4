"""The commands of the README and docs/ at the size they give them: how long each takes and what it
prints.

tests/test_readme.py runs every command of the README and docs/ as written but smaller (fewer
steps, slices of the data), which the suite's time allows; this bench runs them as written, in the
same order (tests/support/readme.py's PAGES), in one shell, as a user pastes them, in a directory
laid out as the repository beside ../shared (its out/ starts empty), and prints a table: each
command, its wall time, the load average when it ended, and the figures of its closing summary
(`name = value` lines) or of the eval_results file it wrote. Blocks that test_readme does not run
(the opening `make demo` / `make test`, flags-only, gs:// and `...` blocks) are not run here
either. Run it under the shared lock:

  flock /tmp/bert_tf_heavy.lock .venv/bin/python bench/bench_readme.py --work_dir=/tmp/readme
  ... --skip='run_ner.py'  # commands (and python blocks) matching the expression are not run
"""
import glob
import os
import re
import subprocess
import sys
import time

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from lib.bench_env import REPO
from absl import flags
from lib import harness

sys.path.insert(0, os.path.join(REPO, "tests"))
from support import readme  # noqa: E402  (the pages' blocks, as the tests read them)

FLAGS = flags.FlagValues()
flags.DEFINE_string("work_dir", "/tmp/bench_readme", "The sandbox and its logs.", flag_values=FLAGS)
flags.DEFINE_string("skip", None, "a regular expression: commands not run", flag_values=FLAGS)
# The commands run in the environment the bench was started in, as a user's shell runs them.
USER_ENV = dict(bench_env.STARTED_ENVIRON, TF_CPP_MIN_LOG_LEVEL="2")

SHARED = os.path.join(os.path.dirname(REPO), "shared")
# A closing summary's figure line, after absl's prefix (-v) or the scripts' own time stamp.
_FIGURE = re.compile(r"(?:\]|^\d\d:\d\d:\d\d)\s+([A-Za-z_][\w ]*?) = (\S+)$")


def sandbox(work_dir):
  root = os.path.join(work_dir, "repo")
  os.makedirs(root, exist_ok=True)
  for name in os.listdir(REPO):
    if name not in ("out", "demo_out", ".git", ".pytest_cache") and not os.path.lexists(
        os.path.join(root, name)):
      os.symlink(os.path.join(REPO, name), os.path.join(root, name))
  if not os.path.lexists(os.path.join(work_dir, "shared")):
    os.symlink(SHARED, os.path.join(work_dir, "shared"))
  return root


def figures(log_path):
  """The `name = value` lines of a command's closing summary."""
  found = {}
  with open(log_path, encoding="utf-8", errors="replace") as f:
    for line in f:
      match = _FIGURE.search(line.rstrip())
      if match:
        found[match[1]] = match[2]
  return found


def script(blocks, skip, logs):
  """One bash script: every logical line of the bash blocks, its output into logs/<n>.log, a
  line `@@ n seconds` on fd 3 after it; python blocks as `@@py n` markers to run between."""
  lines = ["set -euo pipefail", "PY=.venv/bin/python"]
  commands = []
  for language, code in blocks:
    if language == "python":
      if skip and re.search(skip, code):
        continue
      commands.append(("python", code))
      lines.append(f"echo '@@py {len(commands) - 1}' >&3; read -r _ <&4")
      continue
    for line in readme.logical_lines(code):
      if not line.strip() or line.lstrip().startswith("#") or line.startswith("PY="):
        continue
      if skip and re.search(skip, line):
        continue
      commands.append(("bash", line.strip()))
      n = len(commands) - 1
      # The command on a line of its own inside the braces: a trailing comment ends with it.
      lines.append(f"__s=$(date +%s.%N); {{ {line.strip()}\n}} > {logs}/{n}.log 2>&1; "
                   f"echo \"@@ {n} $(echo \"$(date +%s.%N) - $__s\" | bc)\" >&3")
  return "\n".join(lines) + "\n", commands


def run_python(code, root, n, logs):
  versions = sorted(glob.glob(os.path.join(root, "out", "*_export", "[0-9]*")))
  if versions:
    code = code.replace("out/mrpc_export/<number>", os.path.relpath(versions[-1], root))
  start = time.time()
  with open(os.path.join(logs, f"{n}.log"), "w") as log:
    done = subprocess.run([os.path.join(REPO, ".venv", "bin", "python"), "-c", code], cwd=root,
                          stdout=log, stderr=subprocess.STDOUT, env=bench_env.STARTED_ENVIRON)
  return time.time() - start, done.returncode


def main(_):
  args = harness.values(FLAGS)
  root = sandbox(args.work_dir)
  logs = os.path.join(args.work_dir, "logs")
  os.makedirs(logs, exist_ok=True)
  blocks = [(lang, code) for _, lang, code in readme.run_blocks()]
  text, commands = script(blocks, args.skip, logs)
  results = []
  read_3, write_3 = os.pipe()
  read_4, write_4 = os.pipe()
  text = f"exec 3>&{write_3} 4<&{read_4}\n" + text
  shell = subprocess.Popen(["bash", "-c", text], cwd=root, pass_fds=(write_3, read_4),
                           env=USER_ENV,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  os.close(write_3)
  os.close(read_4)
  with os.fdopen(read_3) as markers, os.fdopen(write_4, "w") as go:
    for marker in markers:
      parts = marker.split()
      if parts[0] == "@@py":
        n = int(parts[1])
        seconds, rc = run_python(commands[n][1], root, n, logs)
        go.write("\n")
        go.flush()
      else:
        n, seconds, rc = int(parts[1]), float(parts[2]), 0
      found = figures(os.path.join(logs, f"{n}.log"))
      results.append((n, seconds, os.getloadavg()[0], rc, found))
      print(f"[{n}] {seconds:.0f} s, load {os.getloadavg()[0]:.1f}: "
            f"{commands[n][1].splitlines()[0][:100]}\n    {found}", flush=True)
  shell.wait()
  if shell.returncode:
    print(shell.stderr.read()[-3000:].decode(errors="replace"))
  print("\n| # | command | wall | load at end | figures |\n|---|---|---|---|---|")
  for n, seconds, load, rc, found in results:
    shown = ", ".join(f"{k} {v}" for k, v in found.items() if k not in ("checkpoint",))
    print(f"| {n} | `{commands[n][1].splitlines()[0][:90]}` | {seconds:.0f} s | {load:.1f} | "
          f"{'FAILED ' if rc else ''}{shown} |")
  return shell.returncode


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

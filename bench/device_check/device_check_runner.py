"""bench/device_check/device_check.py's command runner: each step's commands under `timeout -k`,
each into its own log file, within the run's time budget. Standard library only."""
import os
import re
import shlex
import subprocess
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Budget:
  """Seconds left for steps 1-5; each run's timeout is the least of its own cap and what is left
  (keeping `reserve` for the summary)."""

  def __init__(self, seconds, reserve=5.0):
    self.end = time.monotonic() + seconds
    self.reserve = reserve

  def left(self):
    return max(0.0, self.end - time.monotonic() - self.reserve)

  def timeout(self, cap):
    return min(cap, self.left())


class Runner:
  """Runs commands under `timeout -k`, each into its own log file; keeps the end of a failed
  run's log for the report."""

  def __init__(self, python, work_dir, out, budget):
    self.python = shlex.split(python)
    self.log_dir = os.path.join(work_dir, "logs")
    os.makedirs(self.log_dir, exist_ok=True)
    self.out = out
    self.budget = budget

  def run(self, name, argv, cap, env=None, cwd=REPO):
    """(exit status, the log's text); 124 when it ran past its time box."""
    timeout = self.budget.timeout(cap)
    if timeout < 1:
      return 124, "not started: the budget (--budget_s) is spent"
    log_path = os.path.join(self.log_dir, f"{name}.log")
    with open(log_path, "w", encoding="utf-8") as log:
      rc = subprocess.call(["timeout", "-k", "10", f"{timeout:.0f}", *argv], cwd=cwd,
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           env=dict(os.environ, **(env or {})))
    with open(log_path, encoding="utf-8", errors="replace") as f:
      text = f.read()
    if rc != 0:
      self.out.tail(name, rc, text, timeout)
    return rc, text

  def script(self, name, script, args, cap, env=None):
    return self.run(name, [*self.python, os.path.join(REPO, script), *args], cap, env)


def last_line(text, pattern=None):
  """The last non-empty line of text (matching pattern), shortened, for a step's result."""
  lines = [l.strip() for l in text.splitlines() if l.strip()]
  if pattern:
    lines = [l for l in lines if re.search(pattern, l)]
  return (lines[-1] if lines else "(no output)")[-300:]

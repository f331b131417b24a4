"""Where bench scripts append their sections: benchmarks/<UTC date>.md, the dated history that
BENCHMARKS.md's Current figures table links to (a run's figure goes into that table by hand)."""
import datetime
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def today_file():
  """benchmarks/YYYY-MM-DD.md for today (UTC), started with its title when new."""
  day = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
  path = os.path.join(REPO, "benchmarks", f"{day}.md")
  if not os.path.exists(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(f"# Benchmark runs of {day}\n\nSections appended by the bench/ scripts, in the order "
              f"they ran; the current figure of each measure is in ../BENCHMARKS.md.\n")
  return path

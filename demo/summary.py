"""The demo's last words: its figures as a table in <out_dir>/summary.md (the table the README
shows), then what it made, where, and the commands to try next.

  python demo/summary.py --out_dir=demo_out --seconds=312 --pretrain_steps=1500 --epochs=3

It reads what the stages wrote: create_pretraining_data's log (corpus.log), the pretraining and
classifier eval_results.txt, data/bert_config.json and the answers demo/ask.py printed (ask.txt).
Standard library only: it runs in a second.
"""
import argparse
import json
import os
import re
import sys

# `HH:MM:SS   name = value`: a closing summary's figure line (absl's prefix with -v).
_FIGURE = re.compile(r"(?:\]|^\d\d:\d\d:\d\d)\s+([A-Za-z_][\w ]*?) = (\S+)$")
# demo/ask.py's answer: 'sentence' -> label (probabilities 0.063, 0.937)
_ANSWER = re.compile(r"^(['\"])(.*)\1 -> (.+) \(probabilities ([0-9., ]+)\)$")
# What the model was trained on, for the reader of its answers.
KNOWS = ("synthetic reviews of films and books, restaurants and food, products and apps, hotels "
         "and trips, shops and services, in about 1,000 everyday English words")


def log_figures(path):
  """{name: value} of the figure lines of a script's closing summary in a log."""
  found = {}
  if os.path.exists(path):
    with open(path, encoding="utf-8", errors="replace") as f:
      for line in f:
        match = _FIGURE.search(line.rstrip())
        if match:
          found[match[1]] = match[2]
  return found


def eval_results(path):
  """{key: value} of an eval_results.txt ({} when there is none)."""
  if not os.path.exists(path):
    return {}
  with open(path, encoding="utf-8") as f:
    return dict(line.rstrip("\n").split(" = ", 1) for line in f if " = " in line)


def answers(path):
  """[(sentence, label, highest probability)] of demo/ask.py's printed answers."""
  found = []
  if os.path.exists(path):
    with open(path, encoding="utf-8", errors="replace") as f:
      for line in f:
        match = _ANSWER.match(line.rstrip())
        if match:
          probabilities = [float(p) for p in match[4].split(",")]
          found.append((match[2], match[3], max(probabilities)))
  return found


def _number(value, digits=2):
  try:
    return f"{float(value):.{digits}f}"
  except (TypeError, ValueError):
    return "?"


def table(out_dir, pretrain_steps, epochs):
  """The markdown table of the demo's figures (stage | figures)."""
  corpus = log_figures(os.path.join(out_dir, "corpus.log"))
  with open(os.path.join(out_dir, "data", "bert_config.json"), encoding="utf-8") as f:
    config = json.load(f)
  pretrain = eval_results(os.path.join(out_dir, "pretrain", "eval_results.txt"))
  classifier = eval_results(os.path.join(out_dir, "classifier", "eval_results.txt"))
  rows = [
      ("create_pretraining_data.py",
       f"{corpus.get('documents', '?')} documents -> {corpus.get('instances written', '?')} "
       f"instances (seq 64)"),
      (f"run_pretraining.py, L={config['num_hidden_layers']} H={config['hidden_size']}, "
       f"{config['vocab_size']:,}-piece vocabulary, {pretrain_steps:,} steps of 64",
       f"held-out masked-LM accuracy {_number(pretrain.get('masked_lm_accuracy'), 3)}, "
       f"next-sentence accuracy {_number(pretrain.get('next_sentence_accuracy'), 3)}"),
      (f"run_classifier.py (SST-2 layout), {epochs} epochs",
       f"dev accuracy {_number(classifier.get('eval_accuracy'), 3)}"),
  ]
  for sentence, label, probability in answers(os.path.join(out_dir, "ask.txt")):
    rows.append((f'export_savedmodel.py + `demo/ask.py "{sentence}"`',
                 f"{label}, p={probability:.2f}"))
  return "\n".join(["| stage | figures |", "|---|---|"] +
                   [f"| {stage} | {figures} |" for stage, figures in rows]) + "\n"


def closing_lines(out_dir, seconds, classifier_accuracy):
  """What the demo made, where, and what to try next."""
  accuracy = f" (dev accuracy {_number(classifier_accuracy, 3)})" if classifier_accuracy else ""
  return [
      f"The demo is done ({seconds // 60} min {seconds % 60} s). It made, in {out_dir}/:",
      "  data/         the corpus, its vocabulary, bert_config.json, the labelled sentences",
      "  pretrain/     a small BERT pretrained on the corpus (checkpoints, eval_results.txt)",
      f"  classifier/   the sentiment classifier fine-tuned from it{accuracy}",
      "  export/       the SavedModel that takes raw text (TF Serving's layout)",
      "  summary.md    the figures above as a table; *.log: each stage's whole output",
      f"The model knows {KNOWS}: everyday opinions, not the whole of English.",
      "Try next:",
      '  bash demo.sh "the food was cold and the waiter was rude ."',
      f'  .venv/bin/python demo/ask.py --export_dir={out_dir}/export "a sentence" "another one"',
  ]


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out_dir", default="demo_out")
  parser.add_argument("--seconds", type=int, default=0, help="How long the demo ran.")
  parser.add_argument("--pretrain_steps", type=int, default=1500)
  parser.add_argument("--epochs", type=int, default=3)
  args = parser.parse_args(argv)
  text = table(args.out_dir, args.pretrain_steps, args.epochs)
  with open(os.path.join(args.out_dir, "summary.md"), "w", encoding="utf-8") as f:
    f.write(text)
  classifier = eval_results(os.path.join(args.out_dir, "classifier", "eval_results.txt"))
  sys.stdout.write(text + "\n")
  print("\n".join(closing_lines(args.out_dir, args.seconds, classifier.get("eval_accuracy"))))


if __name__ == "__main__":
  main()

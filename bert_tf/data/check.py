"""`python -m bert_tf.data.check DIR [NAME ...]`: what is missing or malformed in a copy of the data
the docs' commands read, laid out as docs/data.md says (glue/, squad/, conll2003/, swag/, corpus/,
vocab/ under DIR; the commands read DIR = ../shared/data).

For each data set (or only the NAMEs given: `glue/MRPC`, `squad`, ...) it reads every file as the
scripts read it (bert_tf.io.fileio: lines split at "\n" only, UTF-8, a byte order mark dropped) and
checks the layout the canonical source ships: the file names, the header and the columns of every
row, the labels, and the counts (rows, sentences, questions, lines) that a whole copy has. It ends
with one line per data set and exits 1 when a file a page's command reads is not there or a file is
malformed. No TensorFlow: it starts in a second.
"""
import csv
import json
import os
import sys
from typing import NamedTuple, Optional

from bert_tf.errors import BertTfError
from bert_tf.io import fileio
from bert_tf.text import tokenization

# Each data set's problems are listed up to this many; then how many more.
MAX_SHOWN = 3
BINARY = ("0", "1")
NLI = ("contradiction", "entailment", "neutral")
QNLI = ("entailment", "not_entailment")


class Tsv(NamedTuple):
  """A GLUE file: its header's first columns (None: no header), its width when it has no header,
  its label column and labels ("score": a number in [0, 5]), and the rows a whole copy has."""
  header: Optional[tuple]
  width: Optional[int]
  label: Optional[int]
  labels: object
  rows: int


def _glue(header, labels, counts, test_header=None, label=-1):
  """train/dev/test.tsv of a task whose train and dev files share `header`."""
  train, dev, test = counts
  return {"train.tsv": Tsv(header, None, label, labels, train),
          "dev.tsv": Tsv(header, None, label, labels, dev),
          "test.tsv": Tsv(test_header or header[:-1], None, None, None, test)}


PAIR = ("index", "sentence1", "sentence2", "label")
# GLUE as its download script (download_glue_data.py) writes it: data/glue/<task>/.
GLUE = {
    "CoLA": {"train.tsv": Tsv(None, 4, 1, BINARY, 8551), "dev.tsv": Tsv(None, 4, 1, BINARY, 1043),
             "test.tsv": Tsv(("index", "sentence"), None, None, None, 1063)},
    "SST-2": _glue(("sentence", "label"), BINARY, (67349, 872, 1821), ("index", "sentence")),
    "MRPC": _glue(("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"), BINARY,
                  (3668, 408, 1725), ("index", "#1 ID", "#2 ID", "#1 String", "#2 String"), 0),
    "QQP": _glue(("id", "qid1", "qid2", "question1", "question2", "is_duplicate"), BINARY,
                 (363846, 40430, 390965), ("id", "question1", "question2")),
    "STS-B": _glue(("index", "genre", "filename", "year", "old_index", "source1", "source2",
                    "sentence1", "sentence2", "score"), "score", (5749, 1500, 1379)),
    "QNLI": _glue(("index", "question", "sentence", "label"), QNLI, (104743, 5463, 5463)),
    "RTE": _glue(PAIR, QNLI, (2490, 277, 3000)),
    "WNLI": _glue(PAIR, BINARY, (635, 71, 146)),
    "MNLI": {"train.tsv": Tsv(("index", "promptID", "pairID"), None, -1, NLI, 392702),
             "dev_matched.tsv": Tsv(("index", "promptID", "pairID"), None, -1, NLI, 9815),
             "dev_mismatched.tsv": Tsv(("index", "promptID", "pairID"), None, -1, NLI, 9832),
             "test_matched.tsv": Tsv(("index", "promptID", "pairID"), None, None, None, 9796),
             "test_mismatched.tsv": Tsv(("index", "promptID", "pairID"), None, None, None, 9847)},
}
# SQuAD's official files and the 2-article v2.0 subset the pages use: (articles, questions).
SQUAD = {"dev-v2.0.subset.json": (2, 14), "train-v1.1.json": (442, 87599),
         "dev-v1.1.json": (48, 10570), "train-v2.0.json": (442, 130319),
         "dev-v2.0.json": (35, 11873)}
CONLL = {"train.txt": 14041, "valid.txt": 3250, "test.txt": 3453}  # sentences
CONLL_TAGS = {"O"} | {f"{p}-{t}" for p in "BI" for t in ("PER", "ORG", "LOC", "MISC")}
# SWAG's "regular" csv files (rows), and the 11-row sample of them the pages use.
SWAG = {"allennlp-swag-regular-sample.csv": 11, "train.csv": 73546, "val.csv": 20006,
        "test.csv": 20005}
SWAG_COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3")
# The prose: BERT's sample text and the Gutenberg books create_vocab.py learns from (bytes).
CORPUS = {"bert-sample/sample_text.txt": 4394, "gutenberg/pg11-alice_in_wonderland.txt": 151095,
          "gutenberg/pg74-tom_sawyer.txt": 405783, "gutenberg/pg84-frankenstein.txt": 421530,
          "gutenberg/pg174-picture_of_dorian_gray.txt": 437456,
          "gutenberg/pg1184-count_of_monte_cristo.txt": 2767288,
          "gutenberg/pg1342-pride_and_prejudice.txt": 737944,
          "gutenberg/pg1661-adventures_of_sherlock_holmes.txt": 575796,
          "gutenberg/pg2701-moby_dick.txt": 1234589, "gutenberg/pg4300-ulysses.txt": 1533877}
# Google's vocabularies (lines): BERT-Base uncased, cased and Chinese's vocab.txt.
VOCAB = {"bert-base-uncased-vocab.txt": 30522, "bert-base-cased-vocab.txt": 28996,
         "bert-base-chinese-vocab.txt": 21128}
SPECIAL_IDS = {"[PAD]": 0, "[UNK]": 100, "[CLS]": 101, "[SEP]": 102, "[MASK]": 103}
# The files the docs' commands read: a copy without them cannot run that page.
READ_BY_PAGES = {"glue/MRPC": "classification.md", "squad": "squad.md", "conll2003": "ner.md",
                 "swag": "swag.md", "corpus": "pretraining-data.md", "vocab": "vocabularies.md"}
NEEDED_FILES = {"squad": ("dev-v2.0.subset.json",), "swag": ("allennlp-swag-regular-sample.csv",),
                "corpus": tuple(CORPUS), "glue/MRPC": tuple(GLUE["MRPC"]),
                "conll2003": tuple(CONLL)}


def _count(n, what):
  return f"{n:,} {what}" if n != 1 else f"1 {what.rstrip('s')}"


def _differs(count, expected, what):
  return f"{_count(count, what)}, expected {expected:,} (a whole copy's)"


def check_tsv(path, spec):
  """(summary, problems) of a GLUE tsv file, read as the original's _read_tsv reads it."""
  rows = list(csv.reader(fileio.read_lines(path), delimiter="\t", quotechar=None))
  problems = []
  if spec.header:
    found = tuple(rows[0][:len(spec.header)]) if rows else ()
    if found != spec.header:
      return "", [f"header {chr(9).join(found)!r}, expected {chr(9).join(spec.header)!r}"]
  width = len(rows[0]) if spec.header else spec.width
  body = rows[1:] if spec.header else rows
  for number, row in enumerate(body, 2 if spec.header else 1):
    if len(row) != width:
      problems.append(f"line {number} has {len(row)} tab-separated columns, expected {width}")
    elif spec.label is not None and not _label_ok(row[spec.label], spec.labels):
      problems.append(f"line {number}: label {row[spec.label]!r} is not one of "
                      f"{'a number in [0, 5]' if spec.labels == 'score' else spec.labels}")
  if len(body) != spec.rows:
    problems.append(_differs(len(body), spec.rows, "rows"))
  return _count(len(body), "rows"), problems


def _label_ok(value, labels):
  if labels != "score":
    return value in labels
  try:
    return 0.0 <= float(value) <= 5.0
  except ValueError:
    return False


def check_squad(path, expected):
  """(summary, problems) of a SQuAD json file: its nesting, every answer where its offset says."""
  data = json.loads(fileio.read_text(path)).get("data")
  if not isinstance(data, list):
    return "", ["no \"data\" list of articles (not a SQuAD file)"]
  questions, impossible, problems = 0, 0, []
  for article in data:
    for paragraph in article.get("paragraphs", []):
      context = paragraph.get("context", "")
      for qa in paragraph.get("qas", []):
        questions += 1
        impossible += bool(qa.get("is_impossible"))
        for answer in qa.get("answers", []):
          start, text = answer.get("answer_start", -1), answer.get("text", "")
          if context[start:start + len(text)] != text:
            problems.append(f"question {qa.get('id')!r}: answer {text!r} is not at "
                            f"answer_start {start} of its context")
  if (len(data), questions) != expected:
    problems.append(f"{_count(len(data), 'articles')} and {_count(questions, 'questions')}, "
                    f"expected {expected[0]:,} and {expected[1]:,} (a whole copy's)")
  unanswerable = f" ({impossible:,} unanswerable)" if impossible else ""
  return f"{_count(questions, 'questions')}{unanswerable}", problems


def check_conll(path, expected):
  """(summary, problems) of a CoNLL-2003 file: 4 columns (token POS chunk NER), its tags."""
  sentences, in_sentence, problems = 0, False, []
  for number, line in enumerate(fileio.read_lines(path), 1):
    columns = line.split()
    if not columns:
      in_sentence = False
      continue
    if columns[0] == "-DOCSTART-":
      continue
    if len(columns) != 4:
      problems.append(f"line {number} has {len(columns)} columns, expected 4 (token POS chunk NER)")
    elif columns[-1] not in CONLL_TAGS:
      problems.append(f"line {number}: tag {columns[-1]!r} is not O, B-/I- PER, ORG, LOC or MISC")
    sentences += not in_sentence
    in_sentence = True
  if sentences != expected:
    problems.append(_differs(sentences, expected, "sentences"))
  return _count(sentences, "sentences"), problems


def check_swag(path, expected):
  """(summary, problems) of a SWAG csv file in the "regular" format."""
  reader = csv.reader(fileio.read_lines(path))
  header = next(reader, [])
  if not all(column in header for column in SWAG_COLUMNS):
    return "", [f"header has no {', '.join(c for c in SWAG_COLUMNS if c not in header)} "
               f"(expected SWAG's regular csv format)"]
  label = header.index("label") if "label" in header else None
  rows, problems = 0, []
  for number, row in enumerate(reader, 2):
    rows += 1
    if len(row) != len(header):
      problems.append(f"line {number} has {len(row)} columns, expected {len(header)}")
    elif label is not None and row[label] not in ("", "0", "1", "2", "3"):
      problems.append(f"line {number}: label {row[label]!r} is not 0, 1, 2 or 3")
  if rows != expected:
    problems.append(_differs(rows, expected, "rows"))
  return _count(rows, "rows"), problems


def check_text(path, expected_bytes):
  """(summary, problems) of a prose file: UTF-8 text of the canonical copy's size."""
  size = os.path.getsize(path)
  fileio.read_text(path)  # not UTF-8: a BertTfError naming the line and byte
  if size != expected_bytes:
    return "", [f"{size:,} bytes, expected {expected_bytes:,} (the canonical copy's)"]
  return f"{size:,} bytes", []


def check_vocab(path, expected):
  """(summary, problems) of a vocabulary: its lines and the special tokens at their ids."""
  vocab = tokenization.load_vocab(path)
  lines = tokenization.vocab_size(vocab)
  problems = [f"{token} has id {vocab.get(token)}, expected {index}"
              for token, index in SPECIAL_IDS.items() if vocab.get(token) != index]
  if lines != expected:
    problems.append(_differs(lines, expected, "lines"))
  return _count(lines, "lines"), problems


def _file_checks(name):
  """[(file, what it should be, its check)] of a data set."""
  if name.startswith("glue/"):
    return [(file, spec, check_tsv) for file, spec in GLUE[name[5:]].items()]
  table, check = {"squad": (SQUAD, check_squad), "conll2003": (CONLL, check_conll),
                  "swag": (SWAG, check_swag), "corpus": (CORPUS, check_text),
                  "vocab": (VOCAB, check_vocab)}[name]
  return [(file, expected, check) for file, expected in table.items()]


def check_data_set(root, name):
  """(line, problems, needed files missing) of one data set under root."""
  directory = os.path.join(root, name)
  found, absent, problems = [], [], []
  for file, expected, check_file in _file_checks(name):
    path = os.path.join(directory, file)
    if not os.path.exists(path):
      absent.append(file)
      continue
    try:
      summary, file_problems = check_file(path, expected)
    except (BertTfError, ValueError, UnicodeError) as e:  # not UTF-8, not JSON, not a vocabulary
      summary, file_problems = "", [str(e).replace(path + ": ", "")]
    found.append((file, summary))
    problems += [f"{name}/{file}: {problem}" for problem in file_problems]
  missing = [file for file in NEEDED_FILES.get(name, ()) if file in absent]
  if name == "corpus" and found:  # ten files: their count and size, not each
    size = sum(os.path.getsize(os.path.join(directory, file)) for file, _ in found)
    line = f"{_count(len(found), 'files')}, {size / 1e6:.1f} MB"
  else:
    line = ", ".join(f"{file} {summary}".strip() for file, summary in found) or "not there"
  if found and absent:
    line += f"; not there: {', '.join(absent)}"
  if missing:
    line += f" (docs/{READ_BY_PAGES[name]} reads {'it' if len(missing) == 1 else 'them'})"
  if problems:
    line += f"; {_count(len(problems), 'problems')}"
  return line, problems, missing


def data_sets():
  return [f"glue/{task}" for task in GLUE] + ["squad", "conll2003", "swag", "corpus", "vocab"]


def check(root, names=None):
  """{name: (line, problems, missing)} of every data set (or those named) under root."""
  unknown = [name for name in names or () if name not in data_sets()]
  if unknown:
    raise BertTfError(f"{unknown[0]}: not a data set the docs use; known: {', '.join(data_sets())}")
  if not os.path.isdir(root):
    raise BertTfError(f"{root}: not a directory; expected the data laid out as docs/data.md says")
  return {name: check_data_set(root, name) for name in names or data_sets()}


def main(argv):
  if len(argv) < 2 or argv[1].startswith("-"):
    print(__doc__.split("\n\n")[0], file=sys.stderr)
    return 2
  try:
    results = check(argv[1], argv[2:])
  except BertTfError as e:
    print(f"error: {e}", file=sys.stderr)
    return 1
  bad = sum(bool(problems) or bool(missing) for _, problems, missing in results.values())
  there = sum(line != "not there" for line, _, _ in results.values())
  print(f"***** {argv[1]}: {there} of {len(results)} data sets there, "
        f"{'no problem found' if not bad else _count(bad, 'with problems')} *****")
  for name, (line, problems, _) in results.items():
    print(f"  {name}: {line}")
    for problem in problems[:MAX_SHOWN]:
      print(f"    {problem}")
    if len(problems) > MAX_SHOWN:
      print(f"    ... and {len(problems) - MAX_SHOWN} more")
  if bad:
    print(f"error: {argv[1]}: {_count(bad, 'data sets')} not as docs/data.md says (above)",
          file=sys.stderr)
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))

"""Builds a SQuAD 2.0-format data set from wikitext-2 articles, for bench_squad.py.

No full SQuAD set is available here, so questions are made from the text: a sentence of the
paragraph with one span (a year, a number or a capitalized name) replaced by a question word,
e.g. "The band released ___ in 1994." -> "The band released what in 1994?". Unanswerable questions
(SQuAD 2.0 flavour) are made the same way from another paragraph of the same article, so they
share its topic and names but their answer is not in the context.

  python bench/make_synthetic_squad.py --output_dir /tmp/synthetic_squad

writes train.json and dev.json from wiki.valid.tokens + wiki.test.tokens, split by article.
"""
import json
import os
import random
import re

from lib import bench_env  # noqa: F401  (first: the environment every bench runs in)
from absl import flags

from bert_tf.io import fileio
from lib import harness

WIKITEXT = os.path.join(bench_env.DATA, "corpus", "wikitext-2-tokens")

FLAGS = flags.FlagValues()
flags.DEFINE_string("wikitext_dir", WIKITEXT, "Folder with wiki.valid.tokens and wiki.test.tokens.",
                    flag_values=FLAGS)
flags.DEFINE_string("output_dir", None, "Where train.json and dev.json are written.",
                    flag_values=FLAGS)
flags.mark_flag_as_required("output_dir", flag_values=FLAGS)
flags.DEFINE_integer("num_train", 4000, "Questions in train.json (at most).", flag_values=FLAGS)
flags.DEFINE_integer("num_dev", 600, "Questions in dev.json (at most).", flag_values=FLAGS)
flags.DEFINE_float("unanswerable_fraction", 0.33, "Share of questions without an answer.",
                   flag_values=FLAGS)
flags.DEFINE_integer("max_context_words", 150, "Paragraphs are cut to whole sentences under this.",
                     flag_values=FLAGS)
flags.DEFINE_integer("seed", 12345, "Seed of every random choice.", flag_values=FLAGS)

_DETOKENIZE = [(" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" ,", ","), (" .", "."),
               (" ;", ";"), (" :", ":"), (" 's", "'s"), ("( ", "("), (" )", ")"), (" !", "!"),
               (" ?", "?")]
_YEAR = re.compile(r"^(1[0-9]{3}|20[0-9]{2})$")
_NUMBER = re.compile(r"^[0-9][0-9,.]*$")


def read_articles(path):
  """wikitext-2 -> list of articles, each a list of paragraphs (lists of sentences)."""
  articles = []
  with open(path, encoding="utf-8") as reader:
    for line in reader:
      line = line.strip()
      if line.startswith("= ") and not line.startswith("= = "):
        articles.append([])
        continue
      if not line or line.startswith("=") or not articles:
        continue
      for old, new in _DETOKENIZE:
        line = line.replace(old, new)
      sentences = [s.strip() for s in re.split(r"(?<=\.) (?=[A-Z])", line)]
      # wikitext marks rare words <unk>: they stay in the context but make no question.
      sentences = [s.replace("<unk>", "unk") for s in sentences]
      if sentences:
        articles[-1].append(sentences)
  return articles


def cut_paragraph(sentences, max_words):
  kept, words = [], 0
  for sentence in sentences:
    words += len(sentence.split())
    if words > max_words:
      break
    kept.append(sentence)
  return kept


def make_question(sentence, rng):
  """(question, answer) from one sentence, or None when it has no good answer span."""
  words = sentence.rstrip(".").split(" ")
  if len(words) < 8 or "unk" in words:
    return None
  candidates = []
  i = 1  # the first word is capitalized anyway
  while i < len(words):
    word = words[i].strip(",;:")
    if _YEAR.match(word):
      candidates.append((i, i + 1, "when"))
    elif _NUMBER.match(word):
      candidates.append((i, i + 1, "how many"))
    elif word[:1].isupper() and word.isalpha() and word not in ("The", "A", "An"):
      j = i + 1
      while (j < len(words) and j - i < 3 and words[j].strip(",;:").isalpha() and
             words[j][:1].isupper()):
        j += 1
      candidates.append((i, j, "what"))
      i = j
      continue
    i += 1
  if not candidates:
    return None
  start, end, wh = rng.choice(candidates)
  answer = " ".join(words[start:end]).strip(",;:")
  question = " ".join(words[:start] + [wh] + words[end:])
  return question.rstrip(",;: ") + "?", answer


def build(articles, first_article, num_questions, rng):
  """SQuAD 2.0 "data" from articles[first_article:]; also returns the count and the next article."""
  data = []
  num = 0
  article_index = first_article
  for article_index, article in enumerate(articles[first_article:], start=first_article):
    paragraphs = [cut_paragraph(p, FLAGS.max_context_words) for p in article]
    paragraphs = [p for p in paragraphs if len(p) >= 2]
    if len(paragraphs) < 2:
      continue
    entry = {"title": f"article_{article_index}", "paragraphs": []}
    for paragraph_index, sentences in enumerate(paragraphs):
      context = " ".join(sentences)
      qas = []
      for sentence_index in range(len(sentences)):
        qid = f"{article_index}_{paragraph_index}_{sentence_index}"
        if rng.random() < FLAGS.unanswerable_fraction:
          other = rng.choice([p for i, p in enumerate(paragraphs) if i != paragraph_index])
          made = make_question(rng.choice(other), rng)
          if made and made[1] not in context:
            qas.append({"id": qid, "question": made[0], "answers": [], "is_impossible": True,
                        "plausible_answers": []})
          continue
        made = make_question(sentences[sentence_index], rng)
        if not made:
          continue
        question, answer = made
        sentence_start = context.index(sentences[sentence_index])
        answer_start = context.index(answer, sentence_start)
        qas.append({"id": qid, "question": question, "is_impossible": False,
                    "answers": [{"text": answer, "answer_start": answer_start}]})
      if qas:
        entry["paragraphs"].append({"context": context, "qas": qas})
        num += len(qas)
      if num >= num_questions:
        break
    if entry["paragraphs"]:
      data.append(entry)
    if num >= num_questions:
      break
  return data, num, article_index + 1


def main(_):
  rng = random.Random(FLAGS.seed)
  articles = []
  for source in ("wiki.valid.tokens", "wiki.test.tokens"):
    path = os.path.join(FLAGS.wikitext_dir, source)
    if not os.path.exists(path):
      raise SystemExit(f"error: --wikitext_dir: {path} not found")
    articles.extend(read_articles(path))
  rng.shuffle(articles)
  dev, num_dev, next_article = build(articles, 0, FLAGS.num_dev, rng)
  train, num_train, _ = build(articles, next_article, FLAGS.num_train, rng)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  for split, data, num in (("train", train, num_train), ("dev", dev, num_dev)):
    output = os.path.join(FLAGS.output_dir, f"{split}.json")
    fileio.write_text_atomically(output, json.dumps({"version": "v2.0", "data": data}))
    num_impossible = sum(qa["is_impossible"] for a in data for p in a["paragraphs"]
                         for qa in p["qas"])
    print(f"{output}: {num} questions, {num_impossible} unanswerable")


if __name__ == "__main__":
  harness.run(main, FLAGS, __doc__)

"""Makes the built-in demo's data: a small English-like corpus (and a held-out one), its WordPiece
vocab, a small bert_config.json, and a labelled sentiment set in the GLUE SST-2 layout. Nothing is downloaded; the same --seed gives
the same files.

Documents keep to one topic, so next-sentence prediction is learnable (a random sentence from
another document usually names another topic); sentences follow a small grammar, so masked
words are predictable from context.
"""
import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import json  # noqa: E402
import random  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

flags.DEFINE_string("output_dir", "demo_out/data", "Where corpus.txt, vocab.txt and sst-2/ go.")
flags.DEFINE_integer("num_documents", 1200, "Documents in the pretraining corpus.")
flags.DEFINE_integer("num_heldout_documents", 150, "Documents in the held-out corpus.")
flags.DEFINE_integer("num_labelled", 2400, "Labelled sentences (train + dev).")
flags.DEFINE_integer("seed", 12345, "Random seed.")
FLAGS = flags.FLAGS

TOPICS = {
    "farm": (["farmer", "cow", "horse", "tractor", "barn", "field", "sheep", "goat"],
             ["fed", "milked", "watched", "painted", "cleaned", "sold"],
             ["muddy", "old", "red", "quiet", "busy"]),
    "sea": (["sailor", "ship", "whale", "harbor", "wave", "island", "captain", "net"],
            ["sailed", "steered", "repaired", "spotted", "pulled", "anchored"],
            ["salty", "stormy", "blue", "deep", "calm"]),
    "city": (["driver", "bus", "tower", "street", "market", "bridge", "shop", "train"],
             ["crossed", "built", "opened", "visited", "closed", "followed"],
             ["crowded", "tall", "noisy", "modern", "bright"]),
    "forest": (["hunter", "wolf", "owl", "tree", "river", "fox", "deer", "cabin"],
               ["chased", "climbed", "heard", "tracked", "found", "crossed"],
               ["dark", "green", "wild", "ancient", "silent"]),
    "school": (["teacher", "student", "book", "lesson", "class", "desk", "pencil", "exam"],
               ["read", "wrote", "studied", "explained", "graded", "opened"],
               ["new", "long", "hard", "simple", "careful"]),
}
TIMES = ["in the morning", "at night", "after lunch", "before dawn", "on monday", "in winter"]
POSITIVE = ["wonderful", "great", "delightful", "superb", "excellent", "lovely", "brilliant"]
NEGATIVE = ["terrible", "awful", "boring", "dreadful", "poor", "dull", "horrible"]
FILMS = ["movie", "film", "story", "show", "play", "book"]
ASPECTS = ["acting", "music", "plot", "ending", "writing", "scenery"]
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_sentence(rng, topic):
  nouns, verbs, adjectives = TOPICS[topic]
  subject, obj = rng.sample(nouns, 2)
  parts = ["the", rng.choice(adjectives), subject, rng.choice(verbs), "the", obj]
  if rng.random() < 0.5:
    parts += [rng.choice(TIMES)]
  return " ".join(parts) + " ."


def make_review(rng):
  label = rng.randrange(2)
  words = POSITIVE if label else NEGATIVE
  film, aspect = rng.choice(FILMS), rng.choice(ASPECTS)
  if rng.random() < 0.25:
    # Negation flips the label, so a bag of words is not enough.
    other = NEGATIVE if label else POSITIVE
    return f"the {film} was not {rng.choice(other)} , the {aspect} was {rng.choice(words)} .", label
  templates = [
      f"the {film} was {rng.choice(words)} and the {aspect} was {rng.choice(words)} .",
      f"what a {rng.choice(words)} {film} , the {aspect} felt {rng.choice(words)} .",
      f"i found the {aspect} of this {film} {rng.choice(words)} .",
  ]
  return rng.choice(templates), label


def corpus_text(rng, num_documents):
  documents = []
  for _ in range(num_documents):
    topic = rng.choice(sorted(TOPICS))
    lines = [make_sentence(rng, topic) for _ in range(rng.randint(4, 12))]
    # Some review sentences in the corpus, so pretraining has seen the fine-tuning words.
    if rng.random() < 0.3:
      lines.insert(rng.randrange(len(lines)), make_review(rng)[0])
    documents.append("\n".join(lines))
  return "\n\n".join(documents) + "\n"


def vocab_tokens(text):
  words = sorted(set(text.split()))
  letters = sorted({c for w in words for c in w})
  # Single characters and their ## forms let WordPiece spell out any unseen lower-case word.
  return SPECIAL + words + [c for c in letters if c not in words] + ["##" + c for c in letters]


def main(_):
  rng = random.Random(FLAGS.seed)
  os.makedirs(os.path.join(FLAGS.output_dir, "sst-2"), exist_ok=True)
  corpus = corpus_text(rng, FLAGS.num_documents)
  heldout = corpus_text(rng, FLAGS.num_heldout_documents)
  reviews = [make_review(rng) for _ in range(FLAGS.num_labelled)]
  vocab = vocab_tokens(corpus + heldout + " ".join(text for text, _ in reviews))
  # A small BERT: a few minutes of pretraining on 2 CPU cores.
  config = dict(vocab_size=len(vocab), hidden_size=128, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=512, hidden_act="gelu",
                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                max_position_embeddings=128, type_vocab_size=2, initializer_range=0.02)
  files = {
      "corpus.txt": corpus,
      "heldout.txt": heldout,
      "vocab.txt": "\n".join(vocab) + "\n",
      "bert_config.json": json.dumps(config, indent=2) + "\n",
  }
  num_train = FLAGS.num_labelled * 5 // 6
  for name, rows in (("train.tsv", reviews[:num_train]), ("dev.tsv", reviews[num_train:])):
    files[os.path.join("sst-2", name)] = "sentence\tlabel\n" + "".join(
        f"{text}\t{label}\n" for text, label in rows)
  for name, text in files.items():
    path = os.path.join(FLAGS.output_dir, name)
    with open(path + ".tmp", "w") as f:
      f.write(text)
    os.replace(path + ".tmp", path)
  print(f"demo data: {FLAGS.num_documents} documents ({len(corpus) / 1e3:.0f} kB), "
        f"{FLAGS.num_labelled} labelled sentences, in {FLAGS.output_dir}")


if __name__ == "__main__":
  app.run(main)

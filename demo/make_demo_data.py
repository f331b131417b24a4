"""Makes the built-in demo's data: a small English-like corpus (and a held-out one), its WordPiece
vocab, a small bert_config.json, and a labelled sentiment set in the GLUE SST-2 layout: everyday
opinions of films and books, restaurants and food, products and apps, hotels and trips, shops and
services (REVIEWED). Nothing is downloaded; the same --seed gives the same files.

Documents keep to one topic, so next-sentence prediction is learnable (a random sentence from
another document usually names another topic); sentences follow a small grammar over about a
thousand everyday English words, so masked words are predictable from context and most words of a
user's own sentence are whole words of the vocabulary (the rest are spelled in pieces: every
printable ASCII character is in it, bare and with ##, and common endings such as ##ing, ##ed).
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
flags.DEFINE_integer("num_labelled", 4800, "Labelled sentences (train + dev).")
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
TIMES = ["in the morning", "at night", "after lunch", "before dawn", "on monday", "in winter",
         "last week", "every day", "on sunday", "in the evening", "this year", "yesterday"]
# Everyday English, so that a user's own sentence is mostly whole words of the vocabulary.
PRONOUNS = "i you he she we they".split()
DETERMINERS = "a the this that some every one another his her their our my your its".split()
PREPOSITIONS = ("in on at near behind under over into from with without for about after before "
                "during through across around beside between").split()
AUXILIARIES = "could would should will can might must did does".split()
CONNECTIVES = "and but because so when while although until since if".split()
ADVERBS = ("very really quite too also just still never always often again almost rather "
           "quickly slowly carefully quietly suddenly finally probably certainly nearly usually "
           "sometimes soon later today here there now then well only even maybe").split()
NOUNS = (
    "people person man woman child children boy girl friend family mother father brother sister "
    "son daughter baby wife husband king queen doctor nurse police officer soldier worker "
    "neighbor stranger guest crowd team group world country town village home house room door "
    "window wall floor kitchen garden road car bike boat plane box bag bottle cup glass plate "
    "table chair bed phone computer letter paper picture photo song game ball money price job "
    "work business company office meeting party dinner breakfast food bread water coffee tea "
    "milk apple fruit meat fish bird dog cat animal flower grass rock stone sun moon star sky "
    "rain snow wind fire light air time day week month year hour minute moment life death love "
    "war peace power name word idea question answer problem reason news place side end part way "
    "thing number line point fact kind hand head face eye heart body voice foot mind history "
    "future health language law art science nature weather summer spring autumn evening "
    "afternoon weekend holiday trip journey gift dream plan rule choice chance mistake luck color "
    "sound smell taste mountain hill lake beach park church hospital hotel restaurant library "
    "museum station airport store bank actor actors kid kids sense waste").split()
QUESTIONS = "what who which where how why when".split()
OBJECTS = "me him her us them it you".split()
BE = "is are was were".split()
DEGREES = ["not", "no longer", "more", "much more", "most", "all", "many", "such a", "so"]
VERBS_PAST = (
    "was had did said made went took came saw knew got gave thought told became left felt "
    "brought began kept held stood let meant met ran paid sat spoke led grew lost fell sent "
    "understood drew broke spent cut drove bought wore chose sang ate drank slept woke swam "
    "threw caught taught fought flew forgot hid hit shook shut won wanted needed liked loved "
    "hated asked called tried used worked played moved lived believed happened looked seemed "
    "turned started showed helped talked walked carried waited listened learned changed stopped "
    "reached remembered decided returned finished cooked planted answered laughed smiled cried "
    "danced jumped pushed dropped picked passed filled checked missed enjoyed").split()
VERBS_BASE = (
    "be have do say make go take come see know get give find think tell become leave feel bring "
    "begin keep hold write stand hear meet run pay sit speak read grow lose fall send build "
    "understand buy eat drink sleep play move live help talk walk open close carry wait watch "
    "listen learn change follow stop remember decide return finish cook clean visit answer laugh "
    "smile cry dance enjoy love like hate want need try use work look").split()
ADJECTIVES = (
    "good bad great little big small large long short high low early late important able right "
    "wrong real better worse young happy sad angry afraid tired hungry sick rich poor cheap "
    "expensive hot cold warm cool wet dry clean dirty fresh heavy light beautiful ugly pretty "
    "nice kind cruel funny serious strange normal special difficult possible ready sure true "
    "false whole clear close open loud fast slow safe dangerous empty lucky famous friendly "
    "lonely proud brave honest gentle polite rude smart stupid wise clever soft sweet bitter "
    "yellow white black brown gray orange purple golden wooden round flat wide narrow thin thick "
    "huge tiny").split()
POSITIVE = ("wonderful great delightful superb excellent lovely brilliant good amazing beautiful "
            "fun enjoyable fantastic perfect charming clever fresh exciting smart solid nice "
            "pleasant remarkable outstanding impressive memorable sweet").split()
NEGATIVE = ("terrible awful boring dreadful poor dull horrible bad weak stupid silly slow messy "
            "ugly annoying painful lazy bland flat tedious disappointing pointless confusing "
            "cheap mediocre ridiculous awkward clumsy").split()
LIKED, DISLIKED = "loved liked enjoyed adored admired".split(), "hated disliked".split()
LIKE, DISLIKE = "love like enjoy adore admire".split(), "hate dislike".split()
# What the reviews are about: (things, their aspects, praise and blame of their own), so that the
# model knows everyday opinions, not film reviews alone ("the food was cold and the waiter was
# rude" is negative).
REVIEWED = {
    "films": (["movie", "film", "story", "show", "play", "book", "series", "episode", "novel",
               "comedy", "drama", "thriller", "musical", "sequel"],
              ["acting", "music", "plot", "ending", "writing", "scenery", "cast", "dialogue",
               "characters", "soundtrack", "direction", "humor", "pacing", "script", "effects",
               "costumes"],
              "funny moving touching powerful stunning entertaining engaging gorgeous".split(),
              "predictable forgettable lifeless".split()),
    "food": (["restaurant", "meal", "dinner", "lunch", "breakfast", "pizza", "burger", "soup",
              "cafe", "food", "dish", "salad", "steak", "bakery"],
             ["food", "service", "waiter", "waitress", "staff", "coffee", "dessert", "portions",
              "prices", "atmosphere", "menu", "bread", "sauce", "chef"],
             "delicious tasty friendly helpful warm generous cozy fast polite hot".split(),
             "cold rude greasy stale salty raw overpriced noisy unfriendly dirty".split()),
    "products": (["phone", "laptop", "camera", "headphones", "charger", "blender", "printer",
                  "product", "app", "watch", "keyboard", "speaker", "tablet", "kettle"],
                 ["battery", "screen", "sound", "design", "quality", "price", "delivery",
                  "packaging", "software", "support", "buttons", "update", "case", "cable"],
                 "reliable sturdy fast sharp quiet light handy useful solid clear".split(),
                 "broken cheap flimsy useless faulty buggy loud heavy fragile late".split()),
    "travel": (["hotel", "room", "flight", "trip", "tour", "stay", "holiday", "cruise", "train",
                "apartment"],
               ["bed", "staff", "view", "location", "breakfast", "pool", "service", "seats",
                "guide", "shower", "crew", "wifi"],
               "comfortable clean spacious quiet friendly relaxing helpful calm".split(),
               "dirty cramped noisy rude uncomfortable smelly crowded late".split()),
    "services": (["shop", "store", "bank", "gym", "salon", "garage", "pharmacy", "clinic",
                  "taxi", "delivery", "plumber", "dentist"],
                 ["staff", "service", "manager", "wait", "prices", "support", "driver",
                  "advice", "repair", "appointment"],
                 "friendly helpful quick honest professional patient polite efficient".split(),
                 "rude slow dishonest careless unhelpful expensive late impatient".split()),
}
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Every printable ASCII character, and common English endings, so that a word outside the word
# lists is spelled in pieces (enjoy ##s), not [UNK].
CHARACTERS = [chr(c) for c in range(33, 127) if not chr(c).isupper()]
SUFFIXES = ["s", "es", "ed", "d", "ing", "ly", "er", "ers", "est", "y", "ness", "ful", "less",
            "able", "ment", "tion", "ion", "al", "ity", "ive", "ous", "en", "ism", "ist", "ship"]


def make_sentence(rng, topic):
  """A sentence of the topic (its words make next-sentence prediction learnable), often with
  everyday words around them."""
  nouns, verbs, adjectives = TOPICS[topic]
  subject, obj = rng.sample(nouns, 2)
  c = rng.choice
  kind = rng.randrange(9)
  if kind == 0:
    parts = [c(PRONOUNS), c(VERBS_PAST), c(DETERMINERS), c(ADJECTIVES), c(NOUNS), c(PREPOSITIONS),
             "the", subject]
  elif kind == 1:
    parts = ["the", subject, c(VERBS_PAST), "that the", obj, "was", c(ADVERBS), c(ADJECTIVES)]
  elif kind == 2:
    parts = [c(CONNECTIVES), c(PRONOUNS), c(verbs), "the", subject, ",", c(PRONOUNS),
             c(AUXILIARIES), c(VERBS_BASE), c(DETERMINERS), c(NOUNS)]
  elif kind == 3:
    parts = ["there was a", c(ADJECTIVES), c(NOUNS), c(PREPOSITIONS), "the", c(adjectives), obj]
  elif kind == 4:
    return " ".join([c(QUESTIONS), c(BE), "the", subject, c(PREPOSITIONS), c(OBJECTS), "?"])
  elif kind == 5:
    parts = ["the", subject, c(BE), c(DEGREES), c(ADJECTIVES), "than the", obj]
  elif kind == 6:
    parts = [c(PRONOUNS), c(["wanted", "tried", "needed", "decided", "had"]), "to",
             c(VERBS_BASE), "the", subject, "as", "a", c(NOUNS)]
  else:
    parts = ["the", c(adjectives), subject, c(verbs), "the", obj]
  if rng.random() < 0.5:
    parts += [c(TIMES)]
  return " ".join(parts) + " ."


def make_review(rng):
  label = rng.randrange(2)
  things, aspects, praise, blame = REVIEWED[rng.choice(sorted(REVIEWED))]
  words, other = (POSITIVE + praise, NEGATIVE + blame) if label else (NEGATIVE + blame,
                                                                      POSITIVE + praise)
  film, aspect, w = rng.choice(things), rng.choice(aspects), rng.choice
  if rng.random() < 0.25:
    # Negation flips the label, so a bag of words is not enough.
    return rng.choice([
        f"the {film} was not {w(other)} , the {aspect} was {w(words)} .",
        f"i did not {w(DISLIKE if label else LIKE)} this {film} , it was {w(words)} .",
    ]), label
  templates = [
      f"the {film} was {w(words)} and the {aspect} was {w(words)} .",
      f"what a {w(words)} {film} , the {aspect} felt {w(words)} .",
      f"i found the {aspect} of this {film} {w(words)} .",
      f"i {w(LIKED if label else DISLIKED)} this {film} , the {aspect} was {w(ADVERBS[:4])} "
      f"{w(words)} .",
      f"{w(['we', 'they', 'my friends'])} thought the {film} was {w(words)} .",
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


def word_lists():
  """Every word the generator can write."""
  lists = [PRONOUNS, DETERMINERS, PREPOSITIONS, AUXILIARIES, CONNECTIVES, ADVERBS, NOUNS,
           VERBS_PAST, VERBS_BASE, ADJECTIVES, POSITIVE, NEGATIVE, LIKED, DISLIKED, LIKE, DISLIKE,
           QUESTIONS, OBJECTS, BE, DEGREES, TIMES]
  lists += [words for reviewed in REVIEWED.values() for words in reviewed]
  lists += [words for topic in TOPICS.values() for words in topic]
  return {word for words in lists for phrase in words for word in phrase.split()}


def vocab_tokens(text):
  """The special tokens, every word of the text and of the word lists, every character bare and
  with ## (letters and digits), and common endings with ##."""
  words = sorted(set(text.split()) | word_lists())
  characters = [c for c in CHARACTERS if c not in words]
  return (SPECIAL + words + characters + ["##" + c for c in CHARACTERS if c.isalnum()] +
          ["##" + s for s in SUFFIXES if len(s) > 1])


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

"""Synthetic task data a tiny model learns in seconds (SST-2, CoNLL, SWAG), a SQuAD file's own
whole-word vocabulary, and a toy pretraining corpus."""
import csv
import random
import types

from bert_tf.model.config import BertConfig
from bert_tf.text import tokenization


def synthetic_sst2(data_dir, seed, n):
  rng = random.Random(seed)
  data_dir.mkdir()
  for split, count in (("train", n), ("dev", 64), ("test", 16)):
    lines = ["sentence\tlabel" if split != "test" else "index\tsentence"]
    for i in range(count):
      label = rng.randrange(2)
      words = [rng.choice(["the", "movie", "film", "plot", "was", "is", "a", "very", "story"])
               for _ in range(rng.randrange(3, 8))]
      words.insert(rng.randrange(len(words) + 1), rng.choice(["good", "fine"] if label
                                                             else ["bad", "awful"]))
      text = " ".join(words)
      lines.append(f"{text}\t{label}" if split != "test" else f"{i}\t{text}")
    (data_dir / f"{split}.tsv").write_text("\n".join(lines) + "\n")


# --- CoNLL-2003-format NER ------------------------------------------------------------------------

PEOPLE = ["john", "mary", "peter", "anna"]
PLACES = ["paris", "london", "berlin", "rome"]
OTHERS = ["the", "visited", "met", "in", "and", "today", "a", "city", "went", "to"]


def conll_sentence(rng, length):
  words, tags = [], []
  while len(words) < length:
    r = rng.random()
    if r < 0.2:
      words += [rng.choice(PEOPLE), rng.choice(PEOPLE)]
      tags += ["B-PER", "I-PER"]
    elif r < 0.35:
      words.append(rng.choice(PLACES))
      tags.append("B-LOC")
    else:
      words.append(rng.choice(OTHERS))
      tags.append("O")
  return words, tags


def write_conll(path, sentences, extra=""):
  lines = ["-DOCSTART- -X- -X- O", ""]
  for words, tags in sentences:
    lines += [f"{w.capitalize()} NN I-NP {t}" for w, t in zip(words, tags)] + [""]
  path.write_text("\n".join(lines) + "\n" + extra)


def conll_data(tmp):
  """Tiny CoNLL data in tmp/data, its vocabulary and a 4-layer config, and run_ner.py's common
  flags: SimpleNamespace(tmp, data_dir, common). (conftest's module-scoped conll_data.)"""
  rng = random.Random(0)
  data_dir = tmp / "data"
  data_dir.mkdir()
  write_conll(data_dir / "train.txt", [conll_sentence(rng, rng.randint(3, 9)) for _ in range(160)])
  write_conll(data_dir / "valid.txt", [conll_sentence(rng, rng.randint(3, 9)) for _ in range(30)])
  # One test sentence longer than --max_seq_length, so it is split into windows.
  write_conll(data_dir / "test.txt", [conll_sentence(rng, 40)] +
              [conll_sentence(rng, rng.randint(3, 9)) for _ in range(20)])
  (tmp / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + PEOPLE +
                                           PLACES + OTHERS) + "\n")
  BertConfig(vocab_size=22, hidden_size=16, num_hidden_layers=4, num_attention_heads=2,
             intermediate_size=37, max_position_embeddings=64).to_json_file(
                 str(tmp / "bert_config.json"))
  common = [f"--data_dir={data_dir}", f"--vocab_file={tmp / 'vocab.txt'}",
            f"--bert_config_file={tmp / 'bert_config.json'}", "--max_seq_length=16",
            "--train_batch_size=8", "--learning_rate=3e-3", "--log_steps=20",
            "--save_checkpoints_steps=1000"]
  return types.SimpleNamespace(tmp=tmp, data_dir=data_dir, common=common)


def with_layers(common, directory, num_hidden_layers):
  """conll_data's common flags with a copy of their config of another depth, written in directory
  (for the tests whose checks depend on no depth: each layer is traced again by every run)."""
  [config_flag] = [flag for flag in common if flag.startswith("--bert_config_file=")]
  config = BertConfig.from_json_file(config_flag.split("=", 1)[1])
  config.num_hidden_layers = num_hidden_layers
  path = directory / f"bert_config_{num_hidden_layers}_layers.json"
  config.to_json_file(str(path))
  return [flag for flag in common if flag != config_flag] + [f"--bert_config_file={path}"]


# --- SWAG ---------------------------------------------------------------------------------------

HEADER = ["", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source", "ending0",
          "ending1", "ending2", "ending3", "label"]


def synthetic_swag(path, seed, n):
  """The right ending is the one praising the film, at a random position."""
  rng = random.Random(seed)
  with open(path, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(HEADER)
    for i in range(n):
      context = f"the {rng.choice(['movie', 'film', 'plot'])} was ."
      label = rng.randrange(4)
      endings = [f"really {rng.choice(['awful', 'bad'])} story" for _ in range(4)]
      endings[label] = f"really {rng.choice(['fine', 'good'])} story"
      writer.writerow([i, "v", 0, "", context, "a", "gold"] + endings + [label])


# --- SQuAD ----------------------------------------------------------------------------------------

def small_vocab(dataset, path):
  """Every basic token of the file as a whole word, so nothing is [UNK] and the vocab is tiny."""
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  words = set()
  for article in dataset["data"]:
    for paragraph in article["paragraphs"]:
      words.update(basic.tokenize(paragraph["context"]))
      for qa in paragraph["qas"]:
        words.update(basic.tokenize(qa["question"]))
  vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
  path.write_text("\n".join(vocab) + "\n")
  return len(vocab)


# --- Pretraining ----------------------------------------------------------------------------------

def toy_corpus(tmp_path, documents=30, seed=0):
  rng = random.Random(seed)
  words = ["the", "cat", "sat", "on", "a", "mat", "unaffable", "running", "quickly", "dog", "ran", "home"]
  lines = []
  for _ in range(documents):
    for _ in range(rng.randint(1, 6)):
      lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 30))) + ".")
    lines.append("")
  path = tmp_path / "toy.txt"
  path.write_text("\n".join(lines) + "\n")
  return str(path)

"""BertConfig <-> the original bert_config.json, and the one --max_seq_length rule
(check_max_seq_length: a model's position embeddings cap it). TensorFlow-free: bad flags and
config files fail before TensorFlow starts, and create_pretraining_data.py checks its
--max_seq_length here too."""
import copy
import json

from bert_tf.errors import BertTfError
from bert_tf.errors import check
from bert_tf.io import fileio
from bert_tf.io.fileio import write_text_atomically

# The shortest input: [CLS] A [SEP] B [SEP] with a token each side, which create_pretraining_data's
# instances need (a single sentence, [CLS] x [SEP], fits in it too).
MIN_SEQ_LENGTH = 5
# Why a model caps --max_seq_length, as the original says it.
MODEL_LIMIT = "the BERT model was only trained up to sequence length {}"


def check_max_seq_length(max_seq_length, maximum, because=MODEL_LIMIT):
  """The one --max_seq_length rule, which each job checks once, before TensorFlow starts: an
  integer of at least MIN_SEQ_LENGTH and at most `maximum`, the model's max_position_embeddings
  (or, where a job has no model, the longest it can make; `because` says why)."""
  check(max_seq_length >= MIN_SEQ_LENGTH, "max_seq_length",
        f"an integer of at least {MIN_SEQ_LENGTH} ([CLS] A [SEP] B [SEP])", max_seq_length)
  if max_seq_length > maximum:
    raise BertTfError(f"--max_seq_length: cannot use sequence length {max_seq_length} because "
                      f"{because.format(maximum)}")

# Field name -> (type, default). The defaults are the original's BertConfig defaults.
_FIELDS = {
    "vocab_size": (int, None),
    "hidden_size": (int, 768),
    "num_hidden_layers": (int, 12),
    "num_attention_heads": (int, 12),
    "intermediate_size": (int, 3072),
    "hidden_act": (str, "gelu"),
    "hidden_dropout_prob": (float, 0.1),
    "attention_probs_dropout_prob": (float, 0.1),
    "max_position_embeddings": (int, 512),
    "type_vocab_size": (int, 16),
    "initializer_range": (float, 0.02),
}
# Fields a bert_config.json must carry; the rest fall back to the defaults above.
# Rows a config's vocab_size may always have past its vocab.txt (padding for faster matrix shapes).
VOCAB_PADDING = 128

_REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size")
# hidden_act names of a bert_config.json, as the original release means them (case does not
# matter; "" is "linear"): "gelu" is the original's GELU, the tanh approximation; "gelu_exact" is
# the erf form; "gelu_new" is transformers' name for the tanh form, the same as "gelu".
ACTIVATIONS = ("gelu", "gelu_exact", "gelu_new", "relu", "tanh", "linear", "swish", "silu")
# A Hugging Face config.json names them as transformers does: its "gelu" is the erf form.
# transformers' names -> ours ...
HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_python": "gelu_exact", "gelu_new": "gelu",
                  "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu", "gelu_accurate": "gelu",
                  "gelu_python_tanh": "gelu", "relu": "relu", "tanh": "tanh", "linear": "linear",
                  "swish": "swish", "silu": "silu"}
# ... and ours -> transformers' (the tanh form as "gelu_new", which transformers describes as
# the GELU of Google's BERT).
_TO_HF_ACTIVATIONS = {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu",
                      "": "linear"}


class BertConfig:
  """Configuration of a BERT encoder, with the original's field names."""

  def __init__(self, vocab_size, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
               intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
               attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
               initializer_range=0.02, source="BertConfig"):
    values = dict(vocab_size=vocab_size, hidden_size=hidden_size,
                  num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
                  intermediate_size=intermediate_size, hidden_act=hidden_act,
                  hidden_dropout_prob=hidden_dropout_prob,
                  attention_probs_dropout_prob=attention_probs_dropout_prob,
                  max_position_embeddings=max_position_embeddings,
                  type_vocab_size=type_vocab_size, initializer_range=initializer_range)
    for name, value in values.items():
      setattr(self, name, _checked(name, value, source))
    if self.hidden_size % self.num_attention_heads:
      raise BertTfError(
          f"{source}: hidden_size ({self.hidden_size}) is not a multiple of "
          f"num_attention_heads ({self.num_attention_heads})")
    if self.hidden_act.lower() not in ACTIVATIONS + ("",):
      raise BertTfError(f"{source}: hidden_act {self.hidden_act!r} is not one of {ACTIVATIONS}")

  @property
  def head_size(self):
    return self.hidden_size // self.num_attention_heads

  def check_vocab_size(self, num_tokens, vocab_file, exact=False):
    """The one check of a vocabulary against the model's word embeddings: a token id past
    vocab_size has no embedding, and a vocabulary that leaves most rows unused is not the
    model's (an 8,000-piece vocab.txt on a 30,522-row model: its ids pick other tokens' rows).
    Rows past the vocabulary are allowed as padding (fewer than VOCAB_PADDING, as configs rounded
    up to a multiple of 8 or 64) or as create_vocab's shortfall (a corpus that could not fill
    vocab_size: fewer than half the rows); with `exact`, as for an export, the sizes are equal."""
    unused = self.vocab_size - num_tokens
    shortfall = unused >= VOCAB_PADDING and num_tokens < self.vocab_size / 2
    if unused < 0 or shortfall or (exact and unused):
      raise BertTfError(f"--vocab_file: {vocab_file} has {num_tokens} tokens but the model's "
                        f"vocab_size is {self.vocab_size} (--bert_config_file): use the vocab.txt "
                        f"the model was trained with")

  @classmethod
  def from_dict(cls, json_object, source="BertConfig", hugging_face=None):
    """A bert_config.json's object; a Hugging Face config.json's (hugging_face=True, or None and
    the object has "model_type") has its hidden_act read as transformers means it."""
    if not isinstance(json_object, dict):
      raise BertTfError(f"{source}: expected a JSON object, got {type(json_object).__name__}")
    missing = [name for name in _REQUIRED if name not in json_object]
    if missing:
      raise BertTfError(f"{source}: missing field(s) {', '.join(missing)}")
    # Unknown keys (e.g. Hugging Face's "model_type", "pad_token_id") are ignored, as the original
    # ignored nothing but never met them.
    known = {k: v for k, v in json_object.items() if k in _FIELDS}
    if hugging_face is None:
      hugging_face = "model_type" in json_object
    if hugging_face and "hidden_act" in known:
      known["hidden_act"] = _from_hf_activation(known["hidden_act"], source)
    return cls(source=source, **known)

  @classmethod
  def from_json_file(cls, json_file):
    if not fileio.exists(json_file):
      raise BertTfError(f"{json_file}: bert config file not found")
    text = fileio.read_text(json_file)
    try:
      json_object = json.loads(text)
    except json.JSONDecodeError as e:
      raise BertTfError(f"{json_file}: not valid JSON ({e})") from None
    return cls.from_dict(json_object, source=json_file)

  def to_dict(self):
    return {name: copy.deepcopy(getattr(self, name)) for name in _FIELDS}

  def to_hf_dict(self):
    """The fields with the names of transformers' BertConfig (hidden_act as transformers
    names the same function)."""
    d = self.to_dict()
    act = self.hidden_act.lower()
    d["hidden_act"] = _TO_HF_ACTIVATIONS.get(act, act)
    return d

  def to_json_string(self):
    return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

  def to_json_file(self, json_file):
    write_text_atomically(json_file, self.to_json_string())

  def __eq__(self, other):
    return isinstance(other, BertConfig) and self.to_dict() == other.to_dict()

  def __repr__(self):
    return f"BertConfig({self.to_dict()})"


def _from_hf_activation(name, source):
  if not isinstance(name, str) or name not in HF_ACTIVATIONS:
    raise BertTfError(f"{source}: hidden_act {name!r} (read as transformers names activations) "
                      f"is not one of {tuple(HF_ACTIVATIONS)}")
  return HF_ACTIVATIONS[name]


def _checked(name, value, source):
  expected, _ = _FIELDS[name]
  if expected is float and isinstance(value, int) and not isinstance(value, bool):
    value = float(value)
  if isinstance(value, bool) or not isinstance(value, expected):
    raise BertTfError(f"{source}: field {name} must be {expected.__name__}, "
                      f"got {type(value).__name__} {value!r}")
  if expected is int and value <= 0:
    raise BertTfError(f"{source}: field {name} must be positive, got {value}")
  if expected is float and not 0.0 <= value < 1.0 and name != "initializer_range":
    raise BertTfError(f"{source}: field {name} must be in [0, 1), got {value}")
  return value


"""What every model format says of a model, and how its weights are read.

A format module (tf_checkpoint, hugging_face, and the others registry.FORMATS lists) has:
  NAME                      its --input_format / --output_format name;
  describe(path)            a Described, or None when `path` is not in this format: no TensorFlow
                            op is run, so that a job reads it before its strategy starts;
  source(described)         (formats that checkpoints.open_checkpoint does not read itself) a
                            Source of the weights under the original's TF1 names.
bert_tf.model.model_files is the one door that asks them.
"""
import dataclasses
from typing import Any, Callable, Dict, List, Optional

from bert_tf.model.config import BertConfig


@dataclasses.dataclass(frozen=True)
class Described:
  """What a model's own files say: its format, where its weights are (what the format's reader
  opens), its config (or the file it is in), vocabulary and casing, each None when the files do
  not say. Self-describing formats (authoritative: a Hugging Face or TF Hub model, a keras-hub
  preset) are the model: a flag the user gave may only agree with them. A TF checkpoint's
  neighbours (bert_config.json, vocab.txt beside it) are defaults that a flag replaces."""
  format: str
  weights: str
  config: Optional[BertConfig] = None
  config_file: Optional[str] = None
  vocab_file: Optional[str] = None
  do_lower_case: Optional[bool] = None
  authoritative: bool = False
  extras: Dict[str, Any] = dataclasses.field(default_factory=dict, compare=False)

  def read_config(self):
    """The BertConfig the files say (reading config_file), or None."""
    if self.config is not None:
      return self.config
    return BertConfig.from_json_file(self.config_file) if self.config_file else None


class Source:
  """A checkpoint's tensors keyed by their TF1 names, read lazily: shapes {name: [dims]} and
  read(name) -> numpy array."""

  def __init__(self, path, shapes: Dict[str, List[int]], read: Callable[[str], Any]):
    self.path = path
    self.shapes = shapes
    self.read = read

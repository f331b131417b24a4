"""What every task's server shares: TextServer, the tf.Module bert_tf.serving.export saves, and the
checks of the Python values a bert_tf.serving.predictor call passes to it.

Users of the original asked for TF Serving export: its Estimator predict path rebuilt the graph on
every call. An export here is one tf.Module whose signatures take tf.string tensors [B] and run
FastTokenizer.ragged_ids (tensorflow-text, the same ids as FullTokenizer) and pack_inputs in the
graph, so a client needs nothing of bert_tf. A task's server (its Task.server_class, in the task's
own modules: glue_server, squad_server, ner_server) is a TextServer subclass that states

  INPUTS              the names of its string inputs, in order;
  OPTIONS             the keyword options it takes beyond the model (what task_config.json keeps
                      of them: Task.serving_options gives them at export);
  _serve(*texts)      serving_default: the inputs -> its outputs (tokenization, model and
                      post-processing);
  _inputs(*texts)     tokenize: the inputs -> the model's inputs (input_ids, input_mask, segment_ids
                      [rows, max_seq_length], to check the in-graph tokenization against
                      FullTokenizer; a windowing server adds example_index [rows]);
  predictor_inputs    (classmethod) the Python arguments of a predictor call -> {input: strings};
  predictor_result    (classmethod) one input's outputs ({name: numpy value}) -> a Python result;
  serves(inputs)      (classmethod) whether an export whose serving_default takes these input
                      names is this server's (exports written before info() existed).

info() (a function saved with the module, not a signature) -> task (the registered name),
label_list, pair, regression: what bert_tf.serving.predictor reads to call an export.

The server keeps its Keras model out of tf.Module's tracking (`model`, in memory only) and tracks
the model's variables (`model_variables`), so tf.saved_model.save writes the serving functions and
the variables they read without tracing and saving every Keras layer's call functions, which made
an export several times slower to save and to load. A loaded export therefore has no Keras model.
"""
import tensorflow as tf

from bert_tf.errors import BertTfError


def nul_safe(texts):
  """regex_split stops at a NUL character: make it U+0001, which is also no whitespace, also
  dropped by the tokenizer, and also one byte."""
  return tf.strings.regex_replace(texts, "\x00", "\x01")


class _Untracked:
  """A plain holder: tf.Module tracks no object behind it (so tf.saved_model.save does not save
  it)."""

  __slots__ = ("value",)

  def __init__(self, value):
    self.value = value


class TextServer(tf.Module):
  """The common part of a task's server: tokenizer, model, length, the special ids, info() and the
  serve and tokenize functions of the subclass's INPUTS (see the module docstring)."""

  INPUTS = ()
  OPTIONS = ()

  def __init__(self, task, tokenizer, model, max_seq_length, label_list=None, pair=False,
               regression=False, inputs=None, name=None):
    super().__init__(name=name or "task_server")
    self.tokenizer = tokenizer
    # Not a dependency of the module: tf.saved_model.save would save the Keras model's own layer
    # traces (the module docstring). Its variables are, for the serving functions that read them
    # (the model is built: they all exist); a TensorFlow Lite model has none.
    self._model = _Untracked(model)
    self.model_variables = list(getattr(model, "variables", ()))
    self.max_seq_length = max_seq_length
    vocab = tokenizer.vocab
    self.cls_id, self.sep_id, self.unk_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[UNK]"]
    self.info = tf.function(lambda: {
        "task": tf.constant(task), "pair": tf.constant(pair),
        "regression": tf.constant(regression),
        "label_list": tf.constant(list(label_list or []), tf.string)}, input_signature=[])
    specs = [tf.TensorSpec([None], tf.string, name=input_name)
             for input_name in inputs or self.INPUTS]
    self.serve = tf.function(self._serve, input_signature=specs)
    self.tokenize = tf.function(self._inputs, input_signature=specs)

  @property
  def model(self):
    """The Keras model (or tflite.ServingModel) the server calls; in memory only, not saved."""
    return self._model.value

  def _serve(self, *texts):
    raise NotImplementedError

  def _inputs(self, *texts):
    raise NotImplementedError

  @classmethod
  def serves(cls, inputs):
    return set(inputs) == set(cls.INPUTS)


# ---------------------------------------------------------------------------- predictor calls


def as_list(values, what):
  """A string as a list of one; a list or tuple as a list; anything else an error."""
  if isinstance(values, str):
    return [values]
  if not isinstance(values, (list, tuple)):
    raise BertTfError(f"{what}: expected a string or a list of strings, got "
                      f"{type(values).__name__}")
  if not values:
    raise BertTfError(f"{what}: an empty list; give at least one string")
  return list(values)


def strings(values, what):
  """as_list, every item a str."""
  values = as_list(values, what)
  for i, value in enumerate(values):
    if not isinstance(value, str):
      raise BertTfError(f"{what}[{i}]: expected a string, got {type(value).__name__} "
                        f"{str(value)[:40]!r}")
  return values


def text(value):
  """A server's string output as str."""
  return value.decode("utf-8", "replace")


def no_other_inputs(predictor, others, how="call it on texts"):
  """A BertTfError naming the keyword arguments a predictor call gave that its server does not
  take (None values aside)."""
  given = [name for name, value in others.items() if value is not None]
  if given:
    raise BertTfError(f"{predictor.task} predictor: {'/'.join(f'{name}=' for name in given)} "
                      f"{'is not an input' if len(given) == 1 else 'are not inputs'} of its "
                      f"server; {how}")

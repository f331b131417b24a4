"""`bert_tf.fast_tokenization`, the name the original's users import: the module is bert_tf.text.fast_tokenization."""
import sys

from bert_tf.text import fast_tokenization as _module

sys.modules[__name__] = _module

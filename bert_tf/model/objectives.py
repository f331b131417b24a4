"""The pretraining objective as one unit: masked LM and next sentence prediction, their ablations
(the paper's Table 5: no NSP, left-to-right) and how the masked-LM predictions are drawn (whole
words, the Table 8 mask/keep/random split, dynamic masking), with the names of the features they
read and the outputs their losses take.

TensorFlow-free: the pretraining record's schema (bert_tf.data.records.PRETRAINING_RECORD) is
made of these names; pretraining.py (loss, metrics, the left-to-right targets), packing.py,
dynamic_masking.py, the record writers of bert_tf/data/pretraining_data and the model consult
them and the Objective here.

  Objective(no_nsp=False, left_to_right=False, masking=Masking())
      .predicts_next_sentence   whether the loss has the next-sentence term (not with
                                left_to_right, which predicts every next token instead)
      .run_shape()              what the objective adds to a pretraining run's train_run.json
  Masking(max_predictions_per_seq=20, masked_lm_prob=0.15, do_whole_word_mask=False,
          mask_prob_mask=0.8, mask_prob_keep=0.1, mask_prob_random=0.1, dynamic_masking=False)
      the masked-LM draw, with its rules: of create_pretraining_data.py, or, dynamic, of
      run_pretraining.py at input time (bert_tf.data.dynamic_masking)
"""
import dataclasses

from bert_tf.errors import BertTfError
from bert_tf.errors import check
from bert_tf.options import MODEL
from bert_tf.options import check_fields
from bert_tf.options import option

# The masked LM's features, per prediction slot: where, the original token, 1.0 for a real one.
MASKED_LM_POSITIONS = "masked_lm_positions"
MASKED_LM_IDS = "masked_lm_ids"
MASKED_LM_WEIGHTS = "masked_lm_weights"
MASKED_LM_FEATURES = (MASKED_LM_POSITIONS, MASKED_LM_IDS, MASKED_LM_WEIGHTS)
# The next sentence's label per instance (1: B is a random sentence); packed rows add each
# instance's [CLS] position and a weight per instance slot (bert_tf.data.packing).
NEXT_SENTENCE_LABELS = "next_sentence_labels"
NEXT_SENTENCE_POSITIONS = "next_sentence_positions"
NEXT_SENTENCE_WEIGHTS = "next_sentence_weights"
# The text's features, per token.
TEXT_FEATURES = ("input_ids", "input_mask", "segment_ids")

# The model's outputs the objective's loss reads.
MLM_LOGITS = "mlm_logits"
NSP_LOGITS = "nsp_logits"



@dataclasses.dataclass(frozen=True)
class Masking:
  """How the masked-LM predictions are drawn (the masking flags): by create_pretraining_data.py
  (bert_tf.data.pretraining_data.algorithm.Options.masking) or, dynamic_masking, by
  run_pretraining.py at input time (bert_tf.data.dynamic_masking). masked_lm_prob is the
  original's, in [0, 1]: every instance still predicts at least one token (its
  max(1, round(tokens * masked_lm_prob)))."""
  max_predictions_per_seq: int = option(
      20, "Maximum number of masked LM predictions per sequence.", at_least=1)
  masked_lm_prob: float = option(0.15, "Masked LM probability.", fraction=True)
  do_whole_word_mask: bool = option(False, "Whether to use whole word masking rather than "
                                    "per-WordPiece masking.")
  # The paper's Table 8 ablation: what a chosen token becomes ([MASK] / itself / a random token).
  mask_prob_mask: float = option(
      0.8, "Of the tokens chosen for prediction, the fraction replaced by [MASK] (the paper's "
      "Table 8 ablation). The three --mask_prob_* must sum to 1.")
  mask_prob_keep: float = option(0.1, "Of the tokens chosen for prediction, the fraction left as "
                                 "they are.")
  mask_prob_random: float = option(0.1, "Of the tokens chosen for prediction, the fraction "
                                   "replaced by a random vocab token.")
  dynamic_masking: bool = option(
      False, "Draw the masked-LM predictions at input time, fresh each time an instance is read "
      "(RoBERTa's dynamic masking), from records of create_pretraining_data.py --unmasked, with "
      "--masked_lm_prob, --max_predictions_per_seq, --do_whole_word_mask and --mask_prob_*; "
      "seeded by --seed, evaluation by a fixed seed. Needs --vocab_file.")

  def __post_init__(self):
    check_fields(self)
    probs = (self.mask_prob_mask, self.mask_prob_keep, self.mask_prob_random)
    check(all(0.0 <= p <= 1.0 for p in probs) and abs(sum(probs) - 1.0) < 1e-6,
          "mask_prob_mask/--mask_prob_keep/--mask_prob_random",
          "fractions between 0 and 1 that sum to 1",
          f"{probs[0]:g} + {probs[1]:g} + {probs[2]:g} = {sum(probs):g}")

  @property
  def keep_given_not_mask(self):
    """The original's second coin: keep vs random, given not [MASK] (0.1 / (0.1 + 0.1) is
    exactly 0.5)."""
    keep_or_random = self.mask_prob_keep + self.mask_prob_random
    return self.mask_prob_keep / keep_or_random if keep_or_random > 0 else 1.0


@dataclasses.dataclass(frozen=True)
class Objective:
  """Masked LM, with next sentence prediction unless an ablation drops it (run_pretraining.py's
  --no_nsp and --left_to_right)."""
  no_nsp: bool = option(False, "Ablation: masked LM only, no next sentence prediction.", MODEL)
  left_to_right: bool = option(
      False, "Ablation: a left-to-right LM (causal attention, every next token predicted from "
      "the unmasked text, no next sentence prediction).", MODEL)
  masking: Masking = Masking()

  def __post_init__(self):
    if self.masking.dynamic_masking and self.left_to_right:
      raise BertTfError("--dynamic_masking: not with --left_to_right, which masks nothing (it "
                        "predicts every next token)")

  @property
  def predicts_next_sentence(self):
    return not self.no_nsp and not self.left_to_right

  @property
  def reads_masked_records(self):
    """Whether the records hold the masked-LM features (else dynamic masking draws them)."""
    return not self.masking.dynamic_masking

  def run_shape(self):
    """What the objective changes in a run's checkpoints or input (bert_tf.training.run_dir.RunDir.check)."""
    return {"left_to_right": bool(self.left_to_right),
            "dynamic_masking": bool(self.masking.dynamic_masking)}

  def metric_names(self):
    names = ["masked_lm_accuracy", "masked_lm_loss"]
    if self.predicts_next_sentence:
      names += ["next_sentence_accuracy", "next_sentence_loss"]
    return names

"""CoNLL entity scores as the conlleval script computes them: entities read from IOB1, IOB2 or IOBES
tags, an entity counting when its span and type are both exact, and conlleval's report."""
import collections

from bert_tf.errors import BertTfError


def _split_tag(tag):
  if tag == "O":
    return "O", ""
  prefix, _, entity_type = tag.partition("-")
  return prefix, entity_type


def _chunk_ends(prefix, next_prefix, entity_type, next_type):
  """Whether the chunk holding a `prefix-entity_type` tag ends before `next_prefix-next_type`."""
  return (prefix in ("E", "S") or (prefix in ("B", "I") and next_prefix in ("B", "S", "O")) or
          (prefix != "O" and entity_type != next_type))


def _chunk_starts(prefix, next_prefix, entity_type, next_type):
  """Whether a chunk starts at `next_prefix-next_type` after a `prefix-entity_type` tag."""
  return (next_prefix in ("B", "S") or
          (next_prefix in ("I", "E") and prefix in ("O", "E", "S")) or
          (next_prefix != "O" and entity_type != next_type))


def get_entities(tags):
  """Entities of one tag sequence as conlleval reads them: a set of (type, start, end).

  IOB1, IOB2 and IOBES all read right: an I- after O or after another type opens an entity, a B-
  always opens one, and a type change always closes one.
  """
  entities = set()
  prefix, entity_type, start = "O", "", None
  for i, tag in enumerate(list(tags) + ["O"]):
    next_prefix, next_type = _split_tag(tag)
    if start is not None and _chunk_ends(prefix, next_prefix, entity_type, next_type):
      entities.add((entity_type, start, i))
      start = None
    if _chunk_starts(prefix, next_prefix, entity_type, next_type):
      start = i
    prefix, entity_type = next_prefix, next_type
  return entities


def _precision_recall_f1(correct, predicted, gold):
  precision = correct / predicted if predicted else 0.0
  recall = correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return {"precision": precision, "recall": recall, "f1": f1, "support": gold,
          "predicted": predicted, "correct": correct}


def entity_scores(gold_sequences, predicted_sequences):
  """CoNLL entity-level scores: an entity counts when its span and type are both exact.

  Returns {"overall": {...}, "types": {type: {...}}, "accuracy": token accuracy}, each {...} with
  precision, recall, f1, support (gold entities), predicted and correct counts.
  """
  if len(gold_sequences) != len(predicted_sequences):
    raise BertTfError(f"{len(gold_sequences)} gold sentences but {len(predicted_sequences)} "
                      f"predicted")
  counts = collections.defaultdict(collections.Counter)
  tokens = correct_tokens = 0
  for gold, predicted in zip(gold_sequences, predicted_sequences):
    if len(gold) != len(predicted):
      raise BertTfError(f"a sentence has {len(gold)} gold tags but {len(predicted)} predicted")
    tokens += len(gold)
    correct_tokens += sum(g == p for g, p in zip(gold, predicted))
    gold_entities, predicted_entities = get_entities(gold), get_entities(predicted)
    for entity in gold_entities:
      counts[entity[0]]["gold"] += 1
    for entity in predicted_entities:
      counts[entity[0]]["predicted"] += 1
    for entity in gold_entities & predicted_entities:
      counts[entity[0]]["correct"] += 1
  total = sum(counts.values(), collections.Counter())
  return {
      "overall": _precision_recall_f1(total["correct"], total["predicted"], total["gold"]),
      "types": {t: _precision_recall_f1(c["correct"], c["predicted"], c["gold"])
                for t, c in sorted(counts.items())},
      "accuracy": correct_tokens / tokens if tokens else 0.0,
  }


def scores_to_results(scores, prefix="eval"):
  """Flat `name -> value` for eval_results.txt: overall as eval_*, per type as eval_<TYPE>_*."""
  results = collections.OrderedDict()
  for name in ("precision", "recall", "f1"):
    results[f"{prefix}_{name}"] = scores["overall"][name]
  results[f"{prefix}_accuracy"] = scores["accuracy"]
  results[f"{prefix}_entities"] = scores["overall"]["support"]
  for entity_type, type_scores in scores["types"].items():
    for name in ("precision", "recall", "f1", "support"):
      results[f"{prefix}_{entity_type}_{name}"] = type_scores[name]
  return results


def format_report(scores):
  """A conlleval-style table, for the log and the end of eval_results.txt."""
  overall = scores["overall"]
  lines = [f"accuracy: {100 * scores['accuracy']:6.2f}%; precision: "
           f"{100 * overall['precision']:6.2f}%; recall: {100 * overall['recall']:6.2f}%; "
           f"FB1: {100 * overall['f1']:6.2f}  ({overall['support']} gold, "
           f"{overall['predicted']} found, {overall['correct']} correct)"]
  for entity_type, s in scores["types"].items():
    lines.append(f"{entity_type:>17}: precision: {100 * s['precision']:6.2f}%; recall: "
                 f"{100 * s['recall']:6.2f}%; FB1: {100 * s['f1']:6.2f}  {s['predicted']}")
  return "\n".join(lines)


def result_names(tags, prefix="eval"):
  """The names scores_to_results gives for the entity types of a label list's tags."""
  types = sorted({_split_tag(tag)[1] for tag in tags} - {""})
  empty = _precision_recall_f1(0, 0, 0)
  return list(scores_to_results({"overall": empty, "types": {t: empty for t in types},
                                 "accuracy": 0.0}, prefix))

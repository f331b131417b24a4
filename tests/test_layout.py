"""bert_tf/'s folders are its layers, lowest first, as docs/adding-a-task.md's layout table says:
no module imports from a folder above its own, and the table names every folder and module there
is (and none that is gone). Read from the source files: nothing is imported."""
import ast
import os
import re

from support import readme
from support.paths import REPO

LIBRARY = os.path.join(REPO, "bert_tf")
# The layers, lowest first (the table's order); the top-level short names import from any.
LAYERS = ["io", "text", "model", "data", "training", "tasks", "serving", "drivers", "cli"]


def _modules():
  """{dotted module name: path} of every module in a layer folder."""
  found = {}
  for directory, _, names in os.walk(LIBRARY):
    for name in names:
      if name.endswith(".py"):
        path = os.path.join(directory, name)
        found[os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")] = path
  return found


def _layer(module):
  parts = module.split(".")
  return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else None


def upward_imports(modules):
  """'module -> imported (line)' of each import, at the top or inside a function, from a layer
  above the importing module's."""
  found = []
  for module, path in modules.items():
    own = _layer(module)
    if own is None:
      continue
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read())
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
      elif isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      else:
        continue
      found += [f"{module} -> {name} (line {node.lineno})" for name in names
                if (_layer(name) or 0) > own]
  return sorted(set(found))


def test_no_module_imports_from_a_layer_above_its_own():
  assert upward_imports(_modules()) == []


def test_an_upward_import_is_found(tmp_path):
  module = tmp_path / "loop.py"
  module.write_text("def f():\n  from bert_tf.serving import export\n")
  assert upward_imports({"bert_tf.training.loop": str(module)}) == [
      "bert_tf.training.loop -> bert_tf.serving (line 2)",
      "bert_tf.training.loop -> bert_tf.serving.export (line 2)"]


def layout_table():
  """{folder (e.g. "bert_tf/model/formats"): the words of its entry} of the page's table."""
  text = readme.text_of("docs/adding-a-task.md")
  block = re.search(r"## The layout.*?```text\n(.*?)```", text, re.S).group(1)
  entries, folder = {}, None
  for line in block.splitlines():
    start = re.match(r"(bert_tf/[\w/]+)/\s", line)
    if start:
      folder = start.group(1)
    elif not line.startswith(" "):
      folder = None
    if folder:
      entries.setdefault(folder, set()).update(re.findall(r"\w+", line))
  return entries


def test_the_layout_table_names_every_folder_and_module():
  table = layout_table()
  folders = {os.path.relpath(directory, REPO) for directory, _, names in os.walk(LIBRARY)
             if "__init__.py" in names and directory != LIBRARY}
  assert sorted(folders - set(table)) == [], "folders the table lacks"
  assert sorted(set(table) - folders) == [], "folders the table names that are gone"
  unnamed = [f"{folder}/{name}" for folder in sorted(folders)
             for name in sorted(os.listdir(os.path.join(REPO, folder)))
             if name.endswith(".py") and name != "__init__.py" and name[:-3] not in table[folder]]
  assert unnamed == [], "modules the table does not name"

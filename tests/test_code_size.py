"""The package's Python stays readable: no module over 600 lines, no function over 60.

A function is counted from its ``def`` (decorators not included) to its last line, docstring and
blank lines included; a nested function counts inside its parent and on its own.

Run as a script to list the longest modules and functions:
``python3 tests/test_code_size.py``.
"""

import ast
import os

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "convnet")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60


def python_files(root=ROOT):
    """Every .py file below ``root``, sorted."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        found += [os.path.join(folder, name) for name in sorted(files) if name.endswith(".py")]
    return found


def module_lines(path):
    with open(path, encoding="utf-8") as source:
        return len(source.read().splitlines())


def function_lengths(path, root=ROOT):
    """(lines, 'file:line name') of every function and method in the file, the file named from
    the folder that holds ``root``."""
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), path)
    where = os.path.relpath(path, os.path.dirname(root))
    return [(node.end_lineno - node.lineno + 1, f"{where}:{node.lineno} {node.name}")
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]


def long_modules(root=ROOT, limit=MAX_MODULE_LINES):
    return sorted((module_lines(path), os.path.relpath(path, os.path.dirname(root)))
                  for path in python_files(root) if module_lines(path) > limit)


def long_functions(root=ROOT, limit=MAX_FUNCTION_LINES):
    return sorted(found for path in python_files(root) for found in function_lengths(path, root)
                  if found[0] > limit)


# ---------------------------------------------------------------------------------- the tests
def test_the_counts_see_long_code(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (package / "sub" / "long.py").write_text("def long():\n" + body + "\n" * MAX_MODULE_LINES)
    (package / "short.py").write_text("def short():\n    return 1\n")
    long_file = os.path.join("pkg", "sub", "long.py")
    assert long_functions(str(package)) == [(MAX_FUNCTION_LINES + 1, f"{long_file}:1 long")]
    assert long_modules(str(package)) == [(MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES, long_file)]


def test_no_module_is_over_600_lines():
    found = long_modules()
    assert not found, "modules over 600 lines: " + ", ".join(f"{p} ({n})" for n, p in found)


def test_no_function_is_over_60_lines():
    found = long_functions()
    assert not found, "functions over 60 lines: " + ", ".join(f"{w} ({n})" for n, w in found)


if __name__ == "__main__":
    everything = sorted((f for path in python_files() for f in function_lengths(path)),
                        reverse=True)
    modules = sorted(((module_lines(p), os.path.relpath(p, os.path.dirname(ROOT)))
                      for p in python_files()), reverse=True)
    print("longest modules:")
    for lines, path in modules[:10]:
        print(f"  {lines:5d} {path}")
    print("longest functions:")
    for lines, name in everything[:10]:
        print(f"  {lines:5d} {name}")

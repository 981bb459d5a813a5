"""The package's imports run one way: no circles, and nothing below the session reaches up.

The graph is read from the source (ast), every import counted, also those inside functions: a
deferred import keeps start-up light but is a dependency all the same.

The rule, from the top down (docs/ARCHITECTURE.md):

    cli, __main__, the package itself -> batch, cluster, resume -> session -> sweep, control
    -> params
    session -> data, architecture, model, train, logs, report, display, ...
    everything -> params, errors, _version (which import nothing of the package)

A module may import modules of its own layer or below, never above. Everything that is not named
in ``LAYERS`` lies below the control parser, so none of it may import control, the session, the
batch runner, the cluster or the command line; the bottom layer imports only itself.

Run as a script to print the graph's circles and upward edges:
``python3 tests/test_import_structure.py``.
"""

import ast
import os
import sys

PACKAGE = "convnet"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)

# Layers from the top (0) down; a module not named here is in BELOW_CONTROL. The package itself
# (convnet/__init__.py) re-exports for users and sits at the top.
LAYERS = {
    PACKAGE: 0, f"{PACKAGE}.__main__": 0, f"{PACKAGE}.cli": 0,
    f"{PACKAGE}.batch": 1, f"{PACKAGE}.cluster": 1, f"{PACKAGE}.resume": 1,
    f"{PACKAGE}.session": 2,
    f"{PACKAGE}.control": 3, f"{PACKAGE}.sweep": 3,
    # BELOW_CONTROL (4): every module not named here
    f"{PACKAGE}.params": 5, f"{PACKAGE}.errors": 5, f"{PACKAGE}._version": 5,
}
BELOW_CONTROL = 4


def module_files(root=ROOT, package=PACKAGE):
    """{module name: file path} for every .py file of the package."""
    found = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__pycache__")))
        relative = os.path.relpath(folder, root)
        parts = [package] + ([] if relative == "." else relative.split(os.sep))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            stem = name[:-3]
            found[".".join(parts if stem == "__init__" else parts + [stem])] = \
                os.path.join(folder, name)
    return found


def _imported(module, path, modules):
    """The package modules that ``module`` (at ``path``) imports, anywhere in its body."""
    is_package = path.endswith("__init__.py")
    here = module.split(".") if is_package else module.split(".")[:-1]
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), path)
    targets = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # `from .x import y` imports x.y when y is a module, else x itself
            for alias in node.names:
                submodule = f"{origin}.{alias.name}"
                targets.add(submodule if submodule in modules else origin)
    return {t for t in targets if t in modules and t != module}


def import_graph(root=ROOT, package=PACKAGE):
    """{module: set of package modules it imports}."""
    modules = module_files(root, package)
    return {name: _imported(name, path, modules) for name, path in modules.items()}


def circles(graph):
    """Every strongly connected group of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(start):
        # iterative depth-first search: (module, iterator over its imports)
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            advanced = False
            for target in targets:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    advanced = True
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(groups)


def layer(module):
    return LAYERS.get(module, BELOW_CONTROL)


def upward_edges(graph):
    """(importer, imported) where the imported module lies in a higher layer."""
    return sorted((source, target) for source, targets in graph.items() for target in targets
                  if layer(target) < layer(source))


# ---------------------------------------------------------------------------------- the tests
def test_the_graph_sees_the_package():
    graph = import_graph()
    assert f"{PACKAGE}.session" in graph and f"{PACKAGE}.params" in graph
    assert f"{PACKAGE}.params" in graph[f"{PACKAGE}.control"]
    assert f"{PACKAGE}.sweep" in graph[f"{PACKAGE}.session"]     # which reads control files
    assert f"{PACKAGE}.control" in graph[f"{PACKAGE}.sweep"]


def test_an_upward_import_is_found():
    graph = {f"{PACKAGE}.params": {f"{PACKAGE}.data"}, f"{PACKAGE}.data": {f"{PACKAGE}.control"},
             f"{PACKAGE}.control": {f"{PACKAGE}.params"}}
    assert upward_edges(graph) == [(f"{PACKAGE}.data", f"{PACKAGE}.control"),
                                   (f"{PACKAGE}.params", f"{PACKAGE}.data")]
    assert circles(graph) == [sorted(graph)]


def test_deferred_and_relative_imports_are_counted(tmp_path):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import top\n")
    (package / "top.py").write_text("def f():\n    from .sub import low\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "low.py").write_text("from ..top import f\nfrom .. import top\n")
    graph = import_graph(str(package), "pkg")
    assert graph["pkg"] == {"pkg.top"}
    assert graph["pkg.top"] == {"pkg.sub.low"}
    assert graph["pkg.sub.low"] == {"pkg.top"}
    assert circles(graph) == [["pkg.sub.low", "pkg.top"]]


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(group) for group in found)


def test_no_module_imports_one_above_it():
    found = upward_edges(import_graph())
    assert not found, "imports that reach up: " + ", ".join(f"{a} -> {b}" for a, b in found)


def test_nothing_below_the_session_imports_control_or_session():
    graph = import_graph()
    control, session = f"{PACKAGE}.control", f"{PACKAGE}.session"
    reaching = sorted((source, target) for source, targets in graph.items() for target in targets
                      if target in (control, session) and layer(source) > layer(control))
    assert not reaching, ", ".join(f"{a} -> {b}" for a, b in reaching)


if __name__ == "__main__":
    graph = import_graph()
    found = circles(graph)
    print(f"{len(graph)} modules, {sum(len(t) for t in graph.values())} imports")
    print("circles:", "none" if not found else "")
    for group in found:
        print("   ", " <-> ".join(group))
    upward = upward_edges(graph)
    print("upward imports:", "none" if not upward else "")
    for source, target in upward:
        print(f"    {source} -> {target}")
    sys.exit(1 if found or upward else 0)

"""The package as installed: its modules import one another without a cycle, and it carries its
type marker."""

from __future__ import annotations

import ast
import importlib.resources
import unittest

import agentbus_agent


def _imports(source: str) -> set[str]:
    """The package's own modules that a module imports, anywhere in it (a deferred import inside
    a function or under TYPE_CHECKING is a dependency all the same)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("agentbus_agent."):
            out.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            out.update(a.name.split(".")[1] for a in node.names if a.name.startswith("agentbus_agent."))
    return out


class PackageTest(unittest.TestCase):
    def test_modules_import_without_a_cycle(self) -> None:
        root = importlib.resources.files(agentbus_agent)
        graph = {p.name.removesuffix(".py"): _imports(p.read_text(encoding="utf-8"))
                 for p in root.iterdir() if p.name.endswith(".py") and p.name != "__init__.py"}
        self.assertEqual({"agent", "context", "server", "signature"}, set(graph))
        done: set[str] = set()

        def visit(module: str, path: tuple[str, ...]) -> None:
            if module in path:
                self.fail("import cycle: " + " -> ".join((*path[path.index(module):], module)))
            if module in done:
                return
            for dep in sorted(graph.get(module, ())):
                visit(dep, (*path, module))
            done.add(module)

        for module in sorted(graph):
            visit(module, ())

    def test_marks_itself_typed(self) -> None:
        self.assertTrue(importlib.resources.files(agentbus_agent).joinpath("py.typed").is_file())


if __name__ == "__main__":
    unittest.main()

"""The engine is a lower layer: it takes plain sizes, dtypes and callables, never app config."""

import ast
from pathlib import Path

import lab.engine

ENGINE = Path(lab.engine.__file__).parent


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def test_no_engine_module_imports_the_app_config():
    offenders = {
        path.name: sorted(n for n in imported_modules(path)
                          if n == "lab.config" or n.startswith("lab.config."))
        for path in sorted(ENGINE.glob("*.py"))
    }
    assert {name: found for name, found in offenders.items() if found} == {}
    assert len(offenders) > 5  # the scan saw the engine's modules

"""Without a framework installed, ``import purecover.integrations`` still works and importing that framework's
adapter fails with an ImportError naming the extra to install (checked in a fresh interpreter where the
framework's package is made unimportable)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_PROBE = """
import sys
sys.modules[{blocked!r}] = None  # an unimportable package, as if not installed
import purecover.integrations as integrations
assert all(sys.modules.get(m) is None for m in ("langchain_core", "llama_index", "haystack"))  # none imported
print(integrations.METADATA_KEYS[0])
try:
    from purecover.integrations import {name}
except ImportError as exc:
    print("ImportError:", exc)
"""


@pytest.mark.parametrize(("blocked", "name", "extra"), [
    ("langchain_core", "PurecoverCompressor", "langchain"),
    ("llama_index", "PurecoverNodePostprocessor", "llamaindex"),
    ("haystack", "PurecoverSelector", "haystack"),
])
def test_a_missing_framework_names_its_extra(blocked, name, extra):
    done = subprocess.run([sys.executable, "-c", _PROBE.format(blocked=blocked, name=name)], capture_output=True,
                          text=True, timeout=120, check=True)
    lines = done.stdout.splitlines()
    assert lines[0] == "purecover_score"
    assert lines[1].startswith("ImportError:") and f"pip install -e '.[{extra}]'" in lines[1]

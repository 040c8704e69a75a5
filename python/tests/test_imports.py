"""bitexact._imports.when_loaded: code run right after a module's first import, without
importing it; and what bitexact uses it for (no TorchDynamo import for seeding or tracing)."""

import os
import subprocess
import sys

import pytest

from bitexact import _imports


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``wl_pkg`` with a submodule ``sub`` that records when it ran."""
    pkg = tmp_path / "wl_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sub.py").write_text("import wl_pkg\nwl_pkg.ran = True\nvalue = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "wl_pkg.sub"
    for name in ("wl_pkg.sub", "wl_pkg"):
        sys.modules.pop(name, None)


def test_the_callback_runs_after_the_module_and_before_the_importer_sees_it(package):
    seen = []
    assert _imports.when_loaded(package, lambda m: seen.append(m.value)) is not None
    assert seen == [] and package not in sys.modules  # nothing imported for it
    import wl_pkg.sub

    assert seen == [1]
    assert not any(isinstance(f, _imports._AfterExec) for f in sys.meta_path)
    # Once loaded, a new callback runs at once.
    assert _imports.when_loaded(package, lambda m: seen.append(m.value + 1)) is None
    assert seen == [1, 2] and wl_pkg.sub.value == 1


def test_a_cancelled_callback_is_not_called_and_others_are(package):
    seen = []
    first = _imports.when_loaded(package, lambda m: seen.append("first"))
    _imports.when_loaded(package, lambda m: seen.append("second"))
    first.cancel()
    import wl_pkg.sub  # noqa: F401

    assert seen == ["second"]


def test_seeding_and_tracing_import_no_dynamo_and_inductor_follows_the_switch(tmp_path):
    pytest.importorskip("torch")
    script = (
        "import sys, torch, bitexact\n"
        "bitexact.seed_everything(torch=True)\n"
        "print('torch._dynamo' in sys.modules, torch.are_deterministic_algorithms_enabled())\n"
        "import torch._inductor.config as c\n"
        "print(c.deterministic)\n"
        "torch.use_deterministic_algorithms(False)\n"
        "print(c.deterministic, torch.are_deterministic_algorithms_enabled())\n"
    )
    env = dict(os.environ, BITEXACT_DETERMINISTIC="1")
    out = subprocess.run([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                         check=True).stdout.decode().split("\n")
    assert out[:3] == ["False True", "True", "False False"], out

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
    assert _imports._waiting[package] not in sys.meta_path  # its finder is gone
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


def test_seeding_again_replaces_the_waiting_inductor_setting(monkeypatch):
    torch = pytest.importorskip("torch")
    if "torch._inductor.config" in sys.modules:
        pytest.skip("Inductor's config is loaded in this process: nothing waits for it")
    from bitexact import _seed

    monkeypatch.setattr(_seed, "_inductor_pending", None)
    try:
        for mode in (True, False, True):
            _seed._use_deterministic_algorithms(torch, mode)
        finder = _imports._waiting["torch._inductor.config"]
        assert len(finder.callbacks) == 1  # one setting waits: the last call's
    finally:
        _seed._inductor_pending.cancel()
        torch.use_deterministic_algorithms(False)

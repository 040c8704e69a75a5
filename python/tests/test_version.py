"""``bitexact.__version__``: the version of the installed distribution this very copy of the
package came from, also when the program reaches it through a link from another environment
(what ``bitexact run --trace`` gives a program whose Python lacks bitexact)."""

import os
import shutil
import subprocess
import sys

import bitexact

NAME, VERSION = "bitexact_harness", "9.9.9"


def _installed_copy(site, dist_info=True):
    """A copy of this bitexact package installed in ``site`` (with a ``*.dist-info`` of
    :data:`VERSION` unless not ``dist_info``)."""
    package = os.path.dirname(bitexact.__file__)
    shutil.copytree(package, site / "bitexact", ignore=shutil.ignore_patterns("__pycache__"))
    if dist_info:
        info = site / ("%s-%s.dist-info" % (NAME, VERSION))
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: bitexact-harness\nVersion: %s\n" % VERSION
        )


def _version(path, cwd):
    """``bitexact.__version__`` and where bitexact came from, in a Python whose ``sys.path``
    starts with ``path`` (no site-packages: the test venv's own bitexact is not seen)."""
    env = dict(os.environ, PYTHONPATH=str(path))
    code = "import bitexact; print(bitexact.__version__); print(bitexact.__file__)"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], env=env, cwd=str(cwd), stdout=subprocess.PIPE,
        check=True, timeout=60,
    ).stdout.decode().split("\n")
    return out[0], out[1]


def test_the_version_is_read_beside_the_package_also_through_a_link(tmp_path):
    site, inject = tmp_path / "site", tmp_path / "inject"
    site.mkdir(), inject.mkdir()
    _installed_copy(site)
    assert _version(site, tmp_path)[0] == VERSION
    # Reached through a link whose directory has no dist-info (the program's sys.path lacks
    # the installed distribution): still the version it was installed with.
    os.symlink(str(site / "bitexact"), str(inject / "bitexact"))
    version, origin = _version(inject, tmp_path)
    assert origin.startswith(str(inject)), origin
    assert version == VERSION


def test_a_copy_that_was_not_installed_has_an_unknown_version(tmp_path):
    site, inject = tmp_path / "site", tmp_path / "inject"
    site.mkdir(), inject.mkdir()
    _installed_copy(site, dist_info=False)
    # Another copy's dist-info on sys.path does not count: its files are not this copy.
    other = tmp_path / "other"
    other.mkdir()
    _installed_copy(other)
    shutil.rmtree(str(other / "bitexact"))
    (other / "bitexact").mkdir()
    (other / "bitexact" / "__init__.py").write_text("")
    os.symlink(str(site / "bitexact"), str(inject / "bitexact"))
    path = os.pathsep.join([str(inject), str(other)])
    version, origin = _version(path, tmp_path)
    assert origin.startswith(str(inject)), origin
    assert version == "0+unknown"

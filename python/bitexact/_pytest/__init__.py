"""The pytest plugin (the ``pytest11`` entry point :mod:`bitexact._pytest.plugin`: the
``bitexact`` fixture, ``@pytest.mark.bitexact``, ``--bitexact-update``) and what it is made of:
:mod:`~bitexact._pytest.check` (``check``: a function run K times through ``bitexact run``),
:mod:`~bitexact._pytest.worker` (one isolated run), :mod:`~bitexact._pytest.leaves` (return
values as named tensors, ``bitexact.record``), :mod:`~bitexact._pytest.snapshot`
(``assert_snapshot``) and :mod:`~bitexact._pytest.summary` (the short text of a failure).

Importing the subpackage imports nothing: ``bitexact.record`` loads only ``leaves``, and pytest
itself only where the plugin is loaded.
"""

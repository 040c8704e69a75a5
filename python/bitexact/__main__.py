"""``python -m bitexact ARGS...``: the ``bitexact`` command (see ``bitexact._cli``)."""

from ._cli import main

main()

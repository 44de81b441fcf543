"""``python -m threadstore.cli``: the ``threadstore`` command."""

from threadstore.cli import main

main()

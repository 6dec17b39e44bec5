"""``python -m hyde_tutor.cli``: the same as the ``hyde-tutor`` command."""

from . import main

main()
